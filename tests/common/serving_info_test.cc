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

// A write that fails leaves no temporary file behind (a 0-byte one once stayed).
TEST(ServingInfoTest, AFailedWriteLeavesNothingBehind) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("serving_info_fail_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "info");  // The target is a directory: no rename.
  const std::string path = (dir / "info").string();
  const absl::Status written = WriteServingInfo(path, {{"grpc", "127.0.0.1:1"}});
  EXPECT_FALSE(written.ok());
  EXPECT_NE(written.message().find("cannot rename"), absl::string_view::npos) << written;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pdserve
