// Per-request objectives: the router's classes parse (bad specs name --slo_classes), and a
// request's objectives resolve as its own values, else its class's, else the default, with
// bad values and unknown classes refused naming the field.
#include "router/slo_catalog.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

TEST(SloCatalogTest, ParsesClassesAndResolvesInOrder) {
  auto catalog = SloCatalog::Parse("interactive:500ms:50ms, batch:30s:1s",
                                   SloConfig{.ttft_ms = 2000, .tpot_ms = 200});
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  ASSERT_EQ(catalog->classes().size(), 2u);
  EXPECT_EQ(catalog->classes()[1].name, "batch");

  auto none = catalog->Resolve("", 0, 0);  // The default.
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->ttft_ms, 2000);
  EXPECT_EQ(none->tpot_ms, 200);
  auto interactive = catalog->Resolve("interactive", 0, 0);
  ASSERT_TRUE(interactive.ok());
  EXPECT_EQ(interactive->ttft_ms, 500);
  EXPECT_EQ(interactive->tpot_ms, 50);
  auto own_tpot = catalog->Resolve("batch", 0, 75);  // The request's own value wins.
  ASSERT_TRUE(own_tpot.ok());
  EXPECT_EQ(own_tpot->ttft_ms, 30000);
  EXPECT_EQ(own_tpot->tpot_ms, 75);
  auto own_both = catalog->Resolve("", 120, 30);
  ASSERT_TRUE(own_both.ok());
  EXPECT_EQ(own_both->ttft_ms, 120);
  EXPECT_EQ(own_both->tpot_ms, 30);
}

TEST(SloCatalogTest, BadRequestsNameTheField) {
  auto catalog = SloCatalog::Parse("interactive:500ms:50ms", SloConfig{});
  ASSERT_TRUE(catalog.ok());
  for (const auto& [slo_class, ttft, tpot, message] :
       std::vector<std::tuple<std::string, double, double, std::string>>{
           {"gold", 0, 0,
            "objectives.slo_class: 'gold' is not a class of this router (interactive)"},
           {"", -1, 0, "objectives.ttft_ms: -1"},
           {"", 0, 4e6, "objectives.tpot_ms: 4e+06"},
           {"", std::nan(""), 0, "objectives.ttft_ms: nan"},
           {"", 0, HUGE_VAL, "objectives.tpot_ms: inf"},
       }) {
    auto out = catalog->Resolve(slo_class, ttft, tpot);
    ASSERT_FALSE(out.ok()) << message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(out.status().message(), message)) << out.status();
  }
  auto empty = SloCatalog::Parse("", SloConfig{});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(absl::StrContains(empty->Resolve("x", 0, 0).status().message(), "--slo_classes"));
}

TEST(SloCatalogTest, BadSpecsNameTheFlag) {
  for (const auto& [spec, message] : std::vector<std::pair<std::string, std::string>>{
           {"gold", "'gold' is not NAME:TTFT:TPOT"},
           {"gold:1s", "'gold:1s' is not NAME:TTFT:TPOT"},
           {"gold:fast:1s", "class 'gold'"},
           {"gold:0s:1s", "above 0"},
           {"gold:2h:1s", "at most 1h"},
           {":1s:1s", "class name ''"},
           {"g o:1s:1s", "class name 'g o'"},
           {"a:1s:1s,a:2s:2s", "class 'a' is given twice"},
       }) {
    auto out = SloCatalog::Parse(spec, SloConfig{});
    ASSERT_FALSE(out.ok()) << spec;
    EXPECT_TRUE(absl::StrContains(out.status().message(), "--slo_classes")) << out.status();
    EXPECT_TRUE(absl::StrContains(out.status().message(), message)) << out.status();
  }
}

}  // namespace
}  // namespace pdserve::router
