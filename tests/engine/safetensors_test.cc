#include "engine/safetensors.h"

#include <filesystem>

#include "engine/safetensors_writer.h"
#include "gtest/gtest.h"

namespace pdserve::engine {
namespace {

std::string Valid() {
  SafetensorsWriter w;
  w.AddF32("a", {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  w.AddF32("b", {4}, std::vector<float>{1, 2, 3, 4}, TensorDType::kBF16);
  w.SetMetadata("format", "pt");
  return w.Serialize();
}

// Builds a file from a header text and `data_bytes` bytes of data.
std::string WithHeader(const std::string& header, size_t data_bytes) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + std::string(data_bytes, '\0');
}

absl::Status Parse(const std::string& bytes) {
  return ParseSafetensorsHeader(bytes, bytes.size(), "t.safetensors").status();
}

void ExpectError(const std::string& bytes, absl::string_view needle) {
  const absl::Status s = Parse(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("t.safetensors"), absl::string_view::npos) << s;
}

TEST(SafetensorsTest, ParsesWhatTheWriterWrites) {
  const std::string bytes = Valid();
  auto header = ParseSafetensorsHeader(bytes, bytes.size(), "t");
  ASSERT_TRUE(header.ok()) << header.status();
  ASSERT_EQ(header->tensors.size(), 2u);
  EXPECT_EQ(header->metadata.at("format"), "pt");
  EXPECT_EQ(header->data_offset % 8, 0u);
  const TensorInfo& a = header->tensors[0].name == "a" ? header->tensors[0] : header->tensors[1];
  EXPECT_EQ(a.dtype, TensorDType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.end - a.begin, 24u);
}

TEST(SafetensorsTest, MappedFileGivesTheTensorBytes) {
  const std::string path = ::testing::TempDir() + "/valid.safetensors";
  SafetensorsWriter w;
  w.AddF32("w", {3}, std::vector<float>{1.5f, -2.0f, 3.25f});
  ASSERT_TRUE(w.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorInfo* t = (*file)->Find("w");
  ASSERT_NE(t, nullptr);
  auto data = (*file)->Data(*t);
  ASSERT_EQ(data.size(), 12u);
  EXPECT_EQ(reinterpret_cast<const float*>(data.data())[2], 3.25f);
  EXPECT_EQ((*file)->Find("nope"), nullptr);
  std::filesystem::remove(path);
}

TEST(SafetensorsTest, TruncationIsReportedWithSizes) {
  const std::string bytes = Valid();
  ExpectError(bytes.substr(0, 5), "truncated");
  ExpectError(bytes.substr(0, 20), "truncated: header length");
  // Data cut short: the last tensor's offsets run past the end.
  ExpectError(bytes.substr(0, bytes.size() - 3), "outside the data section");
}

TEST(SafetensorsTest, StructuralErrorsNameTheTensorAndTheExpectation) {
  ExpectError(WithHeader("not json", 0), "not a JSON object");
  ExpectError(WithHeader("[1,2]", 0), "not a JSON object");
  ExpectError(WithHeader(R"({"x": 3})", 0), "tensor 'x' is not an object");
  ExpectError(WithHeader(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", 4),
              "tensor 'x': missing string field 'dtype'");
  ExpectError(WithHeader(R"({"x": {"dtype": "F32", "data_offsets": [0, 4]}})", 4),
              "missing array field 'shape'");
  ExpectError(WithHeader(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
              "'data_offsets' must be [begin, end]");
  ExpectError(WithHeader(R"({"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}})", 4),
              "unknown dtype 'Q4'");
  ExpectError(WithHeader(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
              "non-negative");
  ExpectError(
      WithHeader(R"({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24),
      "tensor 'x': 20 bytes of data, expected 24 for F32[2,3]");
  ExpectError(WithHeader(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 4]}})", 8),
              "data_offsets [8, 4]");
  ExpectError(WithHeader(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                         12),
              "overlap");
  ExpectError(
      WithHeader(
          R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
          4),
      "too large");
  ExpectError(WithHeader(R"({"__metadata__": {"k": 1}})", 0), "__metadata__.k is not a string");
}

TEST(SafetensorsTest, OversizedHeaderLengthIsRefusedBeforeReading) {
  std::string bytes(16, '\0');
  bytes[6] = 0x10;  // 2^52 bytes.
  ExpectError(bytes, "exceeds the limit");
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(SafetensorsFile::Open("/nonexistent/x.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pdserve::engine
