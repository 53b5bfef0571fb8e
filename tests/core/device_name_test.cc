#include "core/device_name.h"

#include "gtest/gtest.h"

namespace rdv {
namespace {

TEST(DeviceNameTest, ParsesFullName) {
  auto name = DeviceName::Parse("/job:worker/replica:0/task:1/device:GPU:3");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->job, "worker");
  EXPECT_EQ(name->replica, 0);
  EXPECT_EQ(name->task, 1);
  EXPECT_EQ(name->type, "GPU");
  EXPECT_EQ(name->id, 3);
  EXPECT_TRUE(name->IsFullySpecified());
  EXPECT_TRUE(name->IsGpu());
  EXPECT_EQ(name->ToString(), "/job:worker/replica:0/task:1/device:GPU:3");
  EXPECT_EQ(name->WorkerName(), "/job:worker/replica:0/task:1");
}

TEST(DeviceNameTest, ParsesShortAndLegacySpellings) {
  auto a = DeviceName::Parse("/job:ps/task:2/cpu:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->type, "CPU");
  EXPECT_FALSE(a->has_replica);
  EXPECT_EQ(a->ToString(), "/job:ps/task:2/device:CPU:0");

  auto b = DeviceName::Parse("/gpu:1");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->type, "GPU");
  EXPECT_EQ(b->id, 1);
  EXPECT_FALSE(b->has_job);

  auto c = DeviceName::Parse("/device:CPU:0");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ToString(), "/device:CPU:0");

  auto d = DeviceName::Parse("/job:localhost/replica:0/task:0/CPU:0");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->IsCpu());
}

TEST(DeviceNameTest, RejectsMalformedNames) {
  for (const char* bad : {"job:w/task:0", "/job:/task:0", "/job:1w", "/job:w/task:x",
                          "/job:w/replica:-1", "/job:w/job:v", "/job:w/device:GPU:a",
                          "/job:w/tpu:0", "/job:w//task:0", "/job:w/", "/job:**",
                          "/device:GPU:0/cpu:1"}) {
    auto name = DeviceName::Parse(bad);
    EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(name.status().message().find(bad), absl::string_view::npos) << name.status();
  }
}

// TensorFlow's parser takes these as partial specifications.
TEST(DeviceNameTest, AcceptsTensorFlowsPartialSpecifications) {
  auto empty = DeviceName::Parse("");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, DeviceName{});

  auto wild = DeviceName::Parse("/job:*/replica:*/task:*/device:*:*");
  ASSERT_TRUE(wild.ok()) << wild.status();
  EXPECT_EQ(*wild, DeviceName{});

  auto any_gpu = DeviceName::Parse("/job:w/device:GPU:*");
  ASSERT_TRUE(any_gpu.ok()) << any_gpu.status();
  EXPECT_TRUE(any_gpu->has_job && any_gpu->has_type && !any_gpu->has_id);
  EXPECT_TRUE(any_gpu->IsGpu());
  EXPECT_EQ(any_gpu->ToString(), "/job:w/device:GPU");

  auto legacy = DeviceName::Parse("/gpu:*");
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_TRUE(legacy->IsGpu() && !legacy->has_id);

  auto shuffled = DeviceName::Parse("/task:1/device:CPU:0/job:w/replica:0");
  ASSERT_TRUE(shuffled.ok()) << shuffled.status();
  EXPECT_EQ(shuffled->ToString(), "/job:w/replica:0/task:1/device:CPU:0");
  EXPECT_TRUE(shuffled->IsFullySpecified());
}

TEST(DeviceNameTest, AWildcardIsNotAFullName) {
  auto name = DeviceName::Parse("/job:w/replica:0/task:*/device:CPU:0");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_FALSE(name->IsFullySpecified());
}

TEST(DeviceNameTest, JobNames) {
  EXPECT_TRUE(IsValidJobName("worker_1"));
  for (const char* bad : {"", "*", "1w", "w-1", "w/x"}) EXPECT_FALSE(IsValidJobName(bad)) << bad;
}

TEST(DeviceNameTest, SameAddressSpace) {
  auto gpu = *DeviceName::Parse("/job:w/replica:0/task:1/device:GPU:0");
  auto cpu = *DeviceName::Parse("/job:w/replica:0/task:1/device:CPU:0");
  auto other = *DeviceName::Parse("/job:w/replica:0/task:2/device:CPU:0");
  auto partial = *DeviceName::Parse("/job:w/task:1/device:CPU:0");
  EXPECT_TRUE(InSameAddressSpace(gpu, cpu));
  EXPECT_FALSE(InSameAddressSpace(gpu, other));
  EXPECT_FALSE(InSameAddressSpace(gpu, partial));
}

}  // namespace
}  // namespace rdv
