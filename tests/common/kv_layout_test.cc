#include "common/kv_layout.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

KvLayout Layout() {
  KvLayout l;
  l.num_layers = 3;
  l.num_kv_heads = 2;
  l.head_dim = 8;
  l.block_size = 4;
  l.dtype = DType::kF16;
  l.num_blocks = 10;
  return l;
}

TEST(KvLayoutTest, OffsetsFollowTheDocumentedLayout) {
  const KvLayout l = Layout();
  ASSERT_TRUE(l.Validate().ok());
  EXPECT_EQ(l.token_bytes(), 2u * 8 * 2);
  EXPECT_EQ(l.region_bytes(), 4u * 32);
  EXPECT_EQ(l.pool_bytes(), 128u * 10 * 2 * 3);
  EXPECT_EQ(l.RegionOffset(0, 0, 0), 0u);
  EXPECT_EQ(l.RegionOffset(0, 0, 1), 128u);   // Consecutive blocks are adjacent.
  EXPECT_EQ(l.RegionOffset(0, 1, 0), 1280u);  // V after all of layer 0's K blocks.
  EXPECT_EQ(l.RegionOffset(2, 1, 9), l.pool_bytes() - 128);
}

TEST(KvLayoutTest, ValidationAndMismatchesNameTheField) {
  KvLayout l = Layout();
  l.block_size = 6;
  EXPECT_NE(l.Validate().message().find("block_size = 6 must be a power of two"),
            absl::string_view::npos);
  l = Layout();
  l.num_kv_heads = 0;
  EXPECT_NE(l.Validate().message().find("num_kv_heads = 0"), absl::string_view::npos);
  KvLayout other = Layout();
  other.num_blocks = 99;
  EXPECT_TRUE(Layout().SameGeometry(other));
  other.dtype = DType::kF32;
  EXPECT_EQ(Layout().GeometryMismatch(other), "dtype f16 vs f32");
  DType d;
  EXPECT_TRUE(ParseDType("bfloat16", &d));
  EXPECT_EQ(d, DType::kBF16);
  EXPECT_FALSE(ParseDType("int4", &d));
}

}  // namespace
}  // namespace pdserve
