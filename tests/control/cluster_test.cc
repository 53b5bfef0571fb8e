#include "control/cluster.h"

#include "gtest/gtest.h"

namespace rdv::control {
namespace {

TEST(ClusterSpecTest, ParsesFlag) {
  auto spec = ClusterSpec::FromFlag("worker=h0:1,h1:2;ps=h2:3");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec->AddressOf("/job:worker/replica:0/task:1"), "h1:2");
  EXPECT_EQ(*spec->AddressOf("/job:ps/replica:0/task:0"), "h2:3");
  EXPECT_EQ(spec->WorkerNames().size(), 3u);
}

TEST(ClusterSpecTest, ParsesJson) {
  auto spec = ClusterSpec::FromJson(R"({"worker": ["a:1", "b:2"]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec->AddressOf("/job:worker/replica:0/task:0"), "a:1");
}

TEST(ClusterSpecTest, RejectsBadSpecs) {
  for (const char* bad : {"", "worker", "worker=", "worker=host", "1job=h:1", "worker=h:"}) {
    EXPECT_EQ(ClusterSpec::FromFlag(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  for (const char* bad : {"", "[]", R"({"worker": "a:1"})", R"({"worker": [1]})", "{"}) {
    EXPECT_EQ(ClusterSpec::FromJson(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(ClusterSpec::FromJsonFile("/nonexistent/cluster.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ClusterSpecTest, UnknownWorkerIsInvalidArgument) {
  auto spec = ClusterSpec::FromFlag("worker=h0:1");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->AddressOf("/job:worker/replica:0/task:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec->AddressOf("/job:ps/replica:0/task:0").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec->AddressOf("/job:worker/replica:1/task:0").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rdv::control
