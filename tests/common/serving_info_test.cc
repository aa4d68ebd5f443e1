#include "common/serving_info.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(ServingInfoTest, RoundTripsAndIsAtomic) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("serving_info_test_" + std::to_string(getpid())))
          .string();
  EXPECT_EQ(ReadServingInfo(path).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteServingInfo(path, {{"grpc", "127.0.0.1:1"}, {"metrics", "127.0.0.1:2"}}).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto info = ReadServingInfo(path);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->at("grpc"), "127.0.0.1:1");
  EXPECT_EQ(info->at("metrics"), "127.0.0.1:2");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace pdserve
