#include "core/environment.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv::env {
namespace {

using testing::ScopedVariable;

constexpr char kName[] = "RDV_ENVIRONMENT_TEST_VALUE";

TEST(EnvironmentTest, UnsetOrEmptyKeepsTheDefault) {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    ScopedVariable variable(kName, value);
    int64_t number = 7;
    ASSERT_TRUE(ReadInt(kName, 0, 10, &number).ok());
    EXPECT_EQ(number, 7);
    std::string choice = "wait";
    ASSERT_TRUE(ReadChoice(kName, {"wait", "poll"}, &choice).ok());
    EXPECT_EQ(choice, "wait");
  }
}

TEST(EnvironmentTest, ReadsValuesInRange) {
  ScopedVariable variable(kName, "250");
  int64_t number = 0;
  ASSERT_TRUE(ReadInt(kName, 100, 1000, &number).ok());
  EXPECT_EQ(number, 250);
  absl::Duration duration;
  ASSERT_TRUE(ReadMilliseconds(kName, absl::Milliseconds(1), absl::Seconds(1), &duration).ok());
  EXPECT_EQ(duration, absl::Milliseconds(250));
  uint64_t bytes = 0;
  ASSERT_TRUE(ReadBytes(kName, 4096, &bytes).ok());
  EXPECT_EQ(bytes, 250u);
}

TEST(EnvironmentTest, RefusesWithOneWordingThatNamesTheVariable) {
  {
    ScopedVariable variable(kName, "5");
    int64_t number = 7;
    const absl::Status status = ReadInt(kName, 100, 1000, &number);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(),
              "RDV_ENVIRONMENT_TEST_VALUE='5': expected an integer from 100 to 1000");
    EXPECT_EQ(number, 7) << "a refused value must not be written";
  }
  {
    ScopedVariable variable(kName, "12k");
    uint64_t bytes = 1;
    EXPECT_EQ(ReadBytes(kName, 1 << 20, &bytes).message(),
              "RDV_ENVIRONMENT_TEST_VALUE='12k': expected a byte count up to 1048576");
  }
  {
    ScopedVariable variable(kName, "spin");
    std::string choice = "wait";
    EXPECT_EQ(ReadChoice(kName, {"wait", "poll"}, &choice).message(),
              "RDV_ENVIRONMENT_TEST_VALUE='spin': expected one of wait, poll");
    EXPECT_EQ(choice, "wait");
  }
}

}  // namespace
}  // namespace rdv::env
