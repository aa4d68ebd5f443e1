#include "common/status_macros.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

absl::Status FailIf(bool fail) {
  return fail ? absl::InvalidArgumentError("bad") : absl::OkStatus();
}

absl::StatusOr<int> ValueOr(bool fail, int v) {
  if (fail) return absl::NotFoundError("missing");
  return v;
}

absl::Status Chain(bool fail, int* reached) {
  RETURN_IF_ERROR(FailIf(fail));
  *reached = 1;
  return absl::OkStatus();
}

absl::StatusOr<int> Doubled(bool fail) {
  ASSIGN_OR_RETURN(int v, ValueOr(fail, 21));
  return v * 2;
}

TEST(StatusMacrosTest, ReturnIfErrorStopsOnError) {
  int reached = 0;
  EXPECT_EQ(Chain(true, &reached).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(Chain(false, &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesAndAssigns) {
  EXPECT_EQ(Doubled(true).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(Doubled(false).ok());
  EXPECT_EQ(*Doubled(false), 42);
}

TEST(StatusMacrosTest, AnnotatePrependsContextAndKeepsCode) {
  const absl::Status s = Annotate(absl::DataLossError("truncated"), "model.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "model.safetensors: truncated");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

}  // namespace
}  // namespace pdserve
