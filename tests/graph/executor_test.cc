// The executor in one process: partitions over IntraProcessRendezvous give
// the single-device results; a failing kernel fails every partition of the
// step with its root cause; nothing waits unbounded.
#include "graph/executor.h"

#include <cstring>

#include "core/cuda.h"
#include "core/device_copy.h"
#include "core/intra_process_rendezvous.h"
#include "core/notification.h"
#include "gmock/gmock.h"
#include "graph/kernels.h"
#include "graph/partition.h"
#include "gtest/gtest.h"

namespace rdv::graph {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWaitLimit = absl::Seconds(30);

// a, b: 2x2 constants on CPU:0 and CPU:1. m = a·b and n = a*a on CPU:1
// (a crosses once); s = m + a and t = Sum(s, axis 0) on CPU:0; z, a NoOp on
// CPU:1, runs after s (a control edge back).
std::string ChainJson(const char* device0, const char* device1, int b_rows = 2) {
  return absl::StrCat(R"({"node": [
    {"name": "a", "op": "Const", "device": ")", device0, R"(",
     "attr": {"value": {"tensor": {"dtype": "float", "shape": [2, 2], "floats": [1, 2, 3, 4]}}}},
    {"name": "b", "op": "Const", "device": ")", device1, R"(",
     "attr": {"value": {"tensor": {"dtype": "float", "shape": [)", b_rows,
                      R"(, 2], "floats": [5, 6, 7, 8]}}}},
    {"name": "m", "op": "MatMul", "device": ")", device1, R"(", "input": ["a", "b"]},
    {"name": "n", "op": "Mul", "device": ")", device1, R"(", "input": ["a", "a:0"]},
    {"name": "s", "op": "Add", "device": ")", device0, R"(", "input": ["m", "a"]},
    {"name": "axis", "op": "Const", "device": ")", device0, R"(",
     "attr": {"value": {"tensor": {"dtype": "int32", "shape": [1], "ints": [0]}}}},
    {"name": "t", "op": "Sum", "device": ")", device0, R"(", "input": ["s", "axis"]},
    {"name": "z", "op": "NoOp", "device": ")", device1, R"(", "input": ["^s"]}
  ]})");
}

constexpr char kCpu0[] = "/job:w/replica:0/task:0/device:CPU:0";
constexpr char kCpu1[] = "/job:w/replica:0/task:0/device:CPU:1";

std::vector<float> Values(const Tensor& tensor) {
  return {tensor.flat<float>(), tensor.flat<float>() + tensor.num_elements()};
}

struct RunResult {
  Notification done;
  absl::Status status;
  std::vector<Tensor> fetched;
};

// Runs every partition at once against one rendezvous, as a step would.
std::map<std::string, std::shared_ptr<RunResult>> RunPartitions(
    const std::map<std::string, std::unique_ptr<Executor>>& executors,
    const std::map<std::string, std::vector<std::string>>& fetches, Rendezvous* rendezvous) {
  std::map<std::string, std::shared_ptr<RunResult>> results;
  for (const auto& [device, executor] : executors) {
    auto result = std::make_shared<RunResult>();
    results[device] = result;
    auto it = fetches.find(device);
    executor->RunAsync(rendezvous, {}, it == fetches.end() ? std::vector<std::string>{} : it->second,
                       [result](absl::Status status, std::vector<Tensor> fetched) {
                         result->status = std::move(status);
                         result->fetched = std::move(fetched);
                         result->done.Notify();
                       });
  }
  for (auto& [device, result] : results) {
    EXPECT_TRUE(result->done.WaitForNotificationWithTimeout(kWaitLimit)) << device << " hangs";
  }
  return results;
}

std::map<std::string, std::unique_ptr<Executor>> ExecutorsFor(const std::string& json) {
  auto graph = Graph::FromJson(json);
  EXPECT_TRUE(graph.ok()) << graph.status();
  auto parts = Partition(*graph, {});
  EXPECT_TRUE(parts.ok()) << parts.status();
  std::map<std::string, std::unique_ptr<Executor>> executors;
  for (auto& [device, part] : *parts) {
    auto executor = Executor::Create(part);
    EXPECT_TRUE(executor.ok()) << executor.status();
    executors[device] = *std::move(executor);
  }
  return executors;
}

TEST(ExecutorTest, OneDeviceComputesTheChain) {
  auto graph = Graph::FromJson(ChainJson(kCpu0, kCpu0));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->def());
  ASSERT_TRUE(executor.ok()) << executor.status();
  IntraProcessRendezvous rendezvous;
  std::vector<Tensor> fetched;
  ASSERT_TRUE((*executor)->Run(&rendezvous, {}, {"t:0", "n", "m:0"}, &fetched, kWaitLimit).ok());
  // m = [[19, 22], [43, 50]]; s = m + a = [[20, 24], [46, 54]]; t = [66, 78].
  EXPECT_EQ(Values(fetched[0]), (std::vector<float>{66, 78}));
  EXPECT_EQ(Values(fetched[1]), (std::vector<float>{1, 4, 9, 16}));
  EXPECT_EQ(Values(fetched[2]), (std::vector<float>{19, 22, 43, 50}));
}

TEST(ExecutorTest, PartitionsGiveTheSingleDeviceResults) {
  auto executors = ExecutorsFor(ChainJson(kCpu0, kCpu1));
  ASSERT_EQ(executors.size(), 2u);
  for (int step = 0; step < 3; ++step) {  // each step on a fresh rendezvous
    IntraProcessRendezvous rendezvous;
    auto results =
        RunPartitions(executors, {{kCpu0, {"t:0"}}, {kCpu1, {"n:0", "m:0"}}}, &rendezvous);
    ASSERT_TRUE(results[kCpu0]->status.ok()) << results[kCpu0]->status;
    ASSERT_TRUE(results[kCpu1]->status.ok()) << results[kCpu1]->status;
    EXPECT_EQ(Values(results[kCpu0]->fetched[0]), (std::vector<float>{66, 78}));
    EXPECT_EQ(Values(results[kCpu1]->fetched[0]), (std::vector<float>{1, 4, 9, 16}));
    EXPECT_EQ(Values(results[kCpu1]->fetched[1]), (std::vector<float>{19, 22, 43, 50}));
    EXPECT_EQ(rendezvous.CountPending().values, 0u) << "a sent tensor was never received";
  }
}

TEST(ExecutorTest, FailingKernelFailsEveryPartitionWithItsRootCause) {
  // b has 3 rows: a·b cannot be multiplied, on CPU:1, while CPU:0 waits for m.
  auto executors = ExecutorsFor(ChainJson(kCpu0, kCpu1, /*b_rows=*/3));
  IntraProcessRendezvous rendezvous;
  auto results = RunPartitions(executors, {{kCpu0, {"t:0"}}}, &rendezvous);
  for (const char* device : {kCpu0, kCpu1}) {
    EXPECT_EQ(results[device]->status.code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_THAT(std::string(results[device]->status.message()),
                HasSubstr("node 'm' (MatMul): shapes [2,2] and [3,2] cannot be multiplied"))
        << device;
  }
  // The next step, on its own rendezvous, runs clean.
  auto good = ExecutorsFor(ChainJson(kCpu0, kCpu1));
  IntraProcessRendezvous next;
  auto next_results = RunPartitions(good, {{kCpu0, {"t:0"}}}, &next);
  EXPECT_TRUE(next_results[kCpu0]->status.ok()) << next_results[kCpu0]->status;
  EXPECT_TRUE(next_results[kCpu1]->status.ok()) << next_results[kCpu1]->status;
}

TEST(ExecutorTest, RecvThatNeverArrivesTimesOut) {
  auto executors = ExecutorsFor(ChainJson(kCpu0, kCpu1));
  IntraProcessRendezvous rendezvous;
  std::vector<Tensor> fetched;
  // Only CPU:0's partition runs: its Recv of m waits for a Send that never comes.
  const absl::Status status =
      executors[kCpu0]->Run(&rendezvous, {}, {"t:0"}, &fetched, absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

TEST(ExecutorTest, BadFetchesAreClearErrors) {
  auto graph = Graph::FromJson(ChainJson(kCpu0, kCpu0));
  ASSERT_TRUE(graph.ok());
  auto executor = Executor::Create(graph->def());
  ASSERT_TRUE(executor.ok());
  IntraProcessRendezvous rendezvous;
  std::vector<Tensor> fetched;
  EXPECT_THAT(std::string((*executor)->Run(&rendezvous, {}, {"nope:0"}, &fetched, kWaitLimit).message()),
              HasSubstr("fetch 'nope:0': no node 'nope'"));
  EXPECT_THAT(std::string((*executor)->Run(&rendezvous, {}, {"t:1"}, &fetched, kWaitLimit).message()),
              HasSubstr("fetch 't:1': node has 1 outputs"));

}

TEST(ExecutorTest, GpuNodesGiveTheCpuResults) {
  constexpr char kGpu0[] = "/job:w/replica:0/task:0/device:GPU:0";
  auto executors = ExecutorsFor(ChainJson(kCpu0, kGpu0));
  IntraProcessRendezvous rendezvous;
  auto results = RunPartitions(executors, {{kCpu0, {"t:0"}}, {kGpu0, {"n:0"}}}, &rendezvous);
  if (cuda::DeviceCount() == 0) {
    // Without a GPU a GPU node fails, naming itself, and the step with it.
    EXPECT_EQ(results[kGpu0]->status.code(), absl::StatusCode::kFailedPrecondition)
        << results[kGpu0]->status;
    EXPECT_EQ(results[kCpu0]->status, results[kGpu0]->status);
    GTEST_SKIP() << "no GPU (" << cuda::UnavailableReason() << "): GPU nodes checked to fail";
  }
  ASSERT_TRUE(results[kCpu0]->status.ok()) << results[kCpu0]->status;
  ASSERT_TRUE(results[kGpu0]->status.ok()) << results[kGpu0]->status;
  EXPECT_EQ(Values(results[kCpu0]->fetched[0]), (std::vector<float>{66, 78}));
  const Tensor& on_gpu = results[kGpu0]->fetched[0];
  EXPECT_FALSE(on_gpu.location().is_host()) << "n lives on the GPU";
  Notification copied;
  absl::StatusOr<Tensor> host;
  CopyTensorAsync(on_gpu, MemoryLocation::Host(), [&](absl::StatusOr<Tensor> value) {
    host = std::move(value);
    copied.Notify();
  });
  ASSERT_TRUE(copied.WaitForNotificationWithTimeout(kWaitLimit));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(Values(*host), (std::vector<float>{1, 4, 9, 16}));
}

TEST(ExecutorTest, FeedsReplaceTheirNodes) {
  auto graph = Graph::FromJson(ChainJson(kCpu0, kCpu0, /*b_rows=*/3));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->def());
  ASSERT_TRUE(executor.ok());
  auto ones = Tensor::Allocate(HostAllocator(), DType::kFloat, *TensorShape::Create({2, 2}));
  ASSERT_TRUE(ones.ok());
  std::fill(ones->flat<float>(), ones->flat<float>() + 4, 1.0f);
  IntraProcessRendezvous rendezvous;
  std::vector<Tensor> fetched;
  // b has 3 rows, so running m would fail: the feed keeps it from running.
  ASSERT_TRUE((*executor)->Run(&rendezvous, {{"m:0", *ones}}, {"t:0"}, &fetched, kWaitLimit).ok());
  EXPECT_EQ(Values(fetched[0]), (std::vector<float>{6, 8}));  // s = a + 1
  const absl::Status wrong =
      (*executor)->Run(&rendezvous, {{"axis:0", *ones}}, {"t:0"}, &fetched, kWaitLimit);
  EXPECT_THAT(std::string(wrong.message()), HasSubstr("feed 'axis:0'"));
}

TEST(KernelsTest, ConstantsRepeatTheirLastValueAndCastConverts) {
  TensorValue value;
  value.set_dtype("int32");
  value.add_shape(3);
  value.add_ints(7);
  auto tensor = TensorFromValue(value);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(TensorSummary(*tensor), "int32 [3] {7, 7, 7}");
  value.add_floats(1.5);
  EXPECT_FALSE(TensorFromValue(value).ok()) << "an int32 constant with float values";

  NodeDef cast;
  cast.set_name("c");
  cast.set_op("Cast");
  SetTypeAttr(&cast, "DstT", DType::kFloat);
  auto cast_out = RunCpuKernel(cast, DType::kFloat, {*tensor});
  ASSERT_TRUE(cast_out.ok()) << cast_out.status();
  EXPECT_EQ(TensorSummary(*cast_out), "float [3] {7, 7, 7}");
}

}  // namespace
}  // namespace rdv::graph
