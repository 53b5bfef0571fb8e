// Graphs across two real worker processes (RegisterGraph / RunGraph /
// CleanupGraph through GraphSession, as rdv-run drives them), over every
// protocol: the examples give the single-device results, one tensor fanned
// out to several consumers crosses once, and a failing kernel fails the
// step on every worker with its root cause while the next step runs clean.
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "control/graph_session.h"
#include "control/worker_process.h"
#include "core/intra_process_rendezvous.h"
#include "gmock/gmock.h"
#include "graph/executor.h"
#include "graph/kernels.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWaitLimit = absl::Seconds(60);
constexpr char kTask0[] = "/job:worker/replica:0/task:0";
constexpr char kTask1[] = "/job:worker/replica:0/task:1";

struct Setting {
  const char* name;
  const char* protocol;
  const char* ucx_tls;      // or null
  bool needs_rdma = false;  // tests/softroce runs these
};

void PrintTo(const Setting& setting, std::ostream* out) { *out << setting.name; }

struct Example {
  const char* file;
  std::vector<std::string> fetches;
};

const Example kExamples[] = {
    {"matmul_chain.json", {"out:0", "y:0", "h:0"}},
    {"fanout.json", {"square:0", "double:0", "rounded:0"}},
    {"control_edge.json", {"total:0"}},
};

graph::Graph LoadExample(const char* file) {
  auto graph = graph::Graph::FromJsonFile(absl::StrCat(RDV_EXAMPLES_DIR, "/", file));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

// The whole graph on one device, in this process.
std::vector<Tensor> SingleDeviceRun(const graph::Graph& graph,
                                    const std::vector<std::string>& fetches) {
  graph::GraphDef def = graph.def();
  for (graph::NodeDef& node : *def.mutable_node()) {
    node.set_device(absl::StrCat(kTask0, "/device:CPU:0"));
  }
  auto executor = graph::Executor::Create(def);
  EXPECT_TRUE(executor.ok()) << executor.status();
  IntraProcessRendezvous rendezvous;
  std::vector<Tensor> fetched;
  EXPECT_TRUE((*executor)->Run(&rendezvous, {}, fetches, &fetched, kWaitLimit).ok());
  return fetched;
}

void ExpectSameTensor(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_EQ(got.dtype(), want.dtype()) << name;
  ASSERT_EQ(got.shape(), want.shape()) << name;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.TotalBytes()), 0) << name;
}

class GraphRunTest : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    const Setting& setting = GetParam();
    if (setting.needs_rdma && !rdv::testing::HaveRdmaDevice()) {
      if (std::getenv("RDV_TEST_REQUIRE_RDMA") != nullptr) FAIL() << "no RDMA device";
      GTEST_SKIP() << "no RDMA device on this machine (tests/softroce runs these)";
    }
    std::vector<EnvChanges> task_env(2);
    for (EnvChanges& env : task_env) {
      env.emplace_back("UCX_TLS", setting.ucx_tls ? std::optional<std::string>(setting.ucx_tls)
                                                  : std::nullopt);
      if (setting.needs_rdma && setting.ucx_tls) env.emplace_back("UCX_UD_VERBS_ETH_DGID_CHECK", "n");
    }
    // Task 1 on the peer device, so that the bytes cross the wire.
    const char* devices[] = {std::getenv("RDV_IB_DEVICE"), std::getenv("RDV_TEST_PEER_IB_DEVICE")};
    for (int task = 0; task < 2 && setting.needs_rdma; ++task) {
      if (devices[task] == nullptr) continue;
      task_env[task].emplace_back("RDV_IB_DEVICE", devices[task]);
      task_env[task].emplace_back("UCX_NET_DEVICES", absl::StrCat(devices[task], ":1"));
    }
    std::string spec;
    auto workers = StartLocalCluster(2, {absl::StrCat("--protocol=", setting.protocol)},
                                     kWaitLimit, &spec, task_env);
    ASSERT_TRUE(workers.ok()) << workers.status();
    workers_ = *std::move(workers);
    auto session = GraphSession::Connect(*ClusterSpec::FromFlag(spec), kWaitLimit);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
  }

  void TearDown() override {
    session_.reset();
    for (auto& worker : workers_) EXPECT_EQ(worker->Stop(), 0) << "a worker did not exit cleanly";
  }

  std::vector<std::unique_ptr<WorkerProcess>> workers_;
  std::unique_ptr<GraphSession> session_;
};

TEST_P(GraphRunTest, ExamplesGiveTheSingleDeviceResults) {
  int64_t step = 1;
  for (const Example& example : kExamples) {
    SCOPED_TRACE(example.file);
    const graph::Graph graph = LoadExample(example.file);
    const std::vector<Tensor> want = SingleDeviceRun(graph, example.fetches);
    ASSERT_TRUE(session_->Register(graph, example.fetches).ok());
    EXPECT_EQ(session_->partitions().size(), 2u);
    for (int repeat = 0; repeat < 2; ++repeat) {
      StepResult result = session_->RunStep(step++, kWaitLimit);
      ASSERT_TRUE(result.status.ok()) << result.status;
      ASSERT_EQ(result.fetched.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ExpectSameTensor(result.fetched[i], want[i], example.fetches[i]);
      }
    }
  }
}

TEST_P(GraphRunTest, OneTensorFannedOutCrossesOnce) {
  const graph::Graph graph = LoadExample("fanout.json");
  ASSERT_TRUE(session_->Register(graph, {"square:0"}).ok());
  int recvs = 0;
  for (const graph::NodeDef& node : session_->partitions().at(kTask1).node()) {
    recvs += node.op() == "_Recv" ? 1 : 0;
  }
  EXPECT_EQ(recvs, 1) << "a, read by three nodes on task 1, is received once";
}

TEST_P(GraphRunTest, FailingKernelFailsTheStepOnEveryWorkerAndTheNextRunsClean) {
  const graph::Graph good = LoadExample("matmul_chain.json");
  graph::GraphDef bad_def = good.def();
  for (graph::NodeDef& node : *bad_def.mutable_node()) {
    if (node.name() != "w2") continue;
    graph::TensorValue* value = (*node.mutable_attr())["value"].mutable_tensor();
    value->set_shape(0, 3);  // [3, 2]: h (2x4) · w2 cannot be multiplied
    value->mutable_floats()->Truncate(6);
  }
  auto bad = graph::Graph::FromGraphDef(bad_def);
  ASSERT_TRUE(bad.ok()) << bad.status();
  ASSERT_TRUE(session_->Register(*bad, {"out:0"}).ok());
  StepResult result = session_->RunStep(7, kWaitLimit);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument) << result.status;
  ASSERT_EQ(result.worker_status.size(), 2u);
  for (const auto& [worker, status] : result.worker_status) {
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("node 'y' (MatMul): shapes [2,4] and [3,2] cannot be multiplied"))
        << worker << ": " << status;
  }
  ASSERT_TRUE(session_->Register(good, {"out:0"}).ok());
  StepResult next = session_->RunStep(8, kWaitLimit);
  EXPECT_TRUE(next.status.ok()) << next.status;
}

TEST_P(GraphRunTest, StepPastItsDeadlineFailsAndTheNextRunsClean) {
  const graph::Graph graph = LoadExample("fanout.json");
  ASSERT_TRUE(session_->Register(graph, {"rounded:0"}).ok());
  StepResult late = session_->RunStep(1, absl::Microseconds(1));
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded) << late.status;
  StepResult next = session_->RunStep(2, kWaitLimit);
  ASSERT_TRUE(next.status.ok()) << next.status;
  EXPECT_EQ(graph::TensorSummary(next.fetched[0], 2), "int64 [256] {768, 768, ...}");
}

INSTANTIATE_TEST_SUITE_P(
    Protocols, GraphRunTest,
    ::testing::Values(Setting{"grpc", "grpc", nullptr},
                      Setting{"grpc_ucx_tcp", "grpc+ucx", "tcp"},
                      Setting{"grpc_ucx_shm", "grpc+ucx", "posix,cma,self"},
                      Setting{"grpc_verbs", "grpc+verbs", nullptr, true},
                      Setting{"grpc_ucx_rdma", "grpc+ucx", "rc_verbs,ud_verbs", true}),
    [](const ::testing::TestParamInfo<Setting>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace rdv::control
