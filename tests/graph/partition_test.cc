// Partitions of small graphs against the nodes and attrs TensorFlow's
// partitioner would make: crossing edges, dedup, control edges, host
// memory on GPUs, keys.
#include "graph/partition.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdv::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

constexpr char kCpu0[] = "/job:w/replica:0/task:0/device:CPU:0";
constexpr char kCpu1[] = "/job:w/replica:0/task:0/device:CPU:1";
constexpr char kCpu2[] = "/job:w/replica:0/task:0/device:CPU:2";
constexpr char kGpu0[] = "/job:w/replica:0/task:0/device:GPU:0";
constexpr char kGpu1[] = "/job:w/replica:0/task:0/device:GPU:1";
constexpr char kTask1[] = "/job:w/replica:0/task:1/device:CPU:0";

class GraphBuilder {
 public:
  GraphBuilder& Const(const std::string& name, const std::string& device,
                      const std::string& dtype = "float") {
    NodeDef* node = Add(name, "Const", device, {});
    TensorValue* value = (*node->mutable_attr())["value"].mutable_tensor();
    value->set_dtype(dtype);
    value->add_shape(1);
    return *this;
  }
  GraphBuilder& Op(const std::string& name, const std::string& op, const std::string& device,
                   std::vector<std::string> inputs) {
    Add(name, op, device, std::move(inputs));
    return *this;
  }
  Graph Build() {
    auto graph = Graph::FromGraphDef(def_);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
  }

 private:
  NodeDef* Add(const std::string& name, const std::string& op, const std::string& device,
               std::vector<std::string> inputs) {
    NodeDef* node = def_.add_node();
    node->set_name(name);
    node->set_op(op);
    node->set_device(device);
    for (auto& input : inputs) node->add_input(input);
    return node;
  }
  GraphDef def_;
};

const NodeDef& Find(const GraphDef& graph, const std::string& name) {
  for (const NodeDef& node : graph.node()) {
    if (node.name() == name) return node;
  }
  ADD_FAILURE() << "no node " << name;
  static const NodeDef none;
  return none;
}

std::vector<std::string> Names(const GraphDef& graph) {
  std::vector<std::string> names;
  for (const NodeDef& node : graph.node()) names.push_back(node.name());
  return names;
}

std::vector<std::string> Inputs(const NodeDef& node) {
  return {node.input().begin(), node.input().end()};
}

std::map<std::string, GraphDef> PartitionByDevice(const Graph& graph) {
  auto parts = Partition(graph, {});
  EXPECT_TRUE(parts.ok()) << parts.status();
  return *std::move(parts);
}

TEST(PartitionTest, CrossingEdgeBecomesSendAndRecvWithTensorFlowsAttrs) {
  Graph graph = GraphBuilder().Const("a", kCpu0).Op("b", "Identity", kCpu1, {"a:0"}).Build();
  auto parts = PartitionByDevice(graph);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_THAT(Names(parts[kCpu0]), UnorderedElementsAre("a", "_send_edge_0_a"));
  EXPECT_THAT(Names(parts[kCpu1]), UnorderedElementsAre("b", "_recv_edge_0_a"));

  const NodeDef& send = Find(parts[kCpu0], "_send_edge_0_a");
  EXPECT_EQ(send.op(), "_Send");
  EXPECT_EQ(send.device(), kCpu0);
  EXPECT_THAT(Inputs(send), ElementsAre("a:0"));
  EXPECT_EQ(*GetStringAttr(send, "tensor_name"), "edge_0_a");
  EXPECT_EQ(*GetStringAttr(send, "send_device"), kCpu0);
  EXPECT_EQ(*GetIntAttr(send, "send_device_incarnation"), 1);
  EXPECT_EQ(*GetStringAttr(send, "recv_device"), kCpu1);
  EXPECT_EQ(*GetBoolAttr(send, "client_terminated", true), false);
  EXPECT_EQ(*GetTypeAttr(send, "T"), DType::kFloat);

  const NodeDef& recv = Find(parts[kCpu1], "_recv_edge_0_a");
  EXPECT_EQ(recv.op(), "_Recv");
  EXPECT_EQ(recv.device(), kCpu1);
  EXPECT_EQ(*GetTypeAttr(recv, "tensor_type"), DType::kFloat);
  EXPECT_THAT(Inputs(Find(parts[kCpu1], "b")), ElementsAre("_recv_edge_0_a:0"));
  // Both ends build one key, TensorFlow's spelling.
  EXPECT_EQ(*SendRecvKey(send), *SendRecvKey(recv));
  EXPECT_EQ(*SendRecvKey(send), absl::StrCat(kCpu0, ";0000000000000001;", kCpu1, ";edge_0_a;0:0"));
}

// TensorFlow keeps a device string as it was assigned: a legacy spelling
// reaches the attrs and the key unchanged.
TEST(PartitionTest, KeysKeepTheDeviceSpellingAsAssigned) {
  constexpr char kLegacyCpu0[] = "/job:w/replica:0/task:0/cpu:0";
  constexpr char kLegacyCpu1[] = "/job:w/replica:0/task:0/cpu:1";
  Graph graph =
      GraphBuilder().Const("a", kLegacyCpu0).Op("b", "Identity", kLegacyCpu1, {"a:0"}).Build();
  auto parts = PartitionByDevice(graph);
  ASSERT_EQ(parts.size(), 2u);
  const NodeDef& send = Find(parts[kCpu0], "_send_edge_0_a");
  const NodeDef& recv = Find(parts[kCpu1], "_recv_edge_0_a");
  EXPECT_EQ(*GetStringAttr(send, "send_device"), kLegacyCpu0);
  EXPECT_EQ(*GetStringAttr(recv, "recv_device"), kLegacyCpu1);
  EXPECT_EQ(*SendRecvKey(send), *SendRecvKey(recv));
  EXPECT_EQ(*SendRecvKey(recv),
            absl::StrCat(kLegacyCpu0, ";0000000000000001;", kLegacyCpu1, ";edge_0_a;0:0"));
}

TEST(PartitionTest, OneOutputIsSentOncePerDestinationPartition) {
  Graph graph = GraphBuilder()
                    .Const("a", kCpu0)
                    .Op("b", "Identity", kCpu1, {"a:0"})
                    .Op("c", "Add", kCpu1, {"a:0", "a:0"})
                    .Op("d", "Identity", kCpu2, {"a:0"})
                    .Op("e", "Identity", kCpu0, {"a:0"})
                    .Build();
  auto parts = PartitionByDevice(graph);
  EXPECT_THAT(Names(parts[kCpu0]),
              UnorderedElementsAre("a", "e", "_send_edge_0_a", "_send_edge_3_a"));
  EXPECT_THAT(Names(parts[kCpu1]), UnorderedElementsAre("b", "c", "_recv_edge_0_a"));
  EXPECT_THAT(Inputs(Find(parts[kCpu1], "c")), ElementsAre("_recv_edge_0_a:0", "_recv_edge_0_a:0"));
  EXPECT_THAT(Names(parts[kCpu2]), UnorderedElementsAre("d", "_recv_edge_3_a"));
  EXPECT_THAT(Inputs(Find(parts[kCpu0], "e")), ElementsAre("a:0"));
}

TEST(PartitionTest, ControlEdgeCrossesThroughAnEmptyConstAndAnIdentity) {
  Graph graph = GraphBuilder()
                    .Const("a", kCpu0)
                    .Op("b", "NoOp", kCpu1, {"^a"})
                    .Op("c", "NoOp", kCpu1, {"^a"})
                    .Build();
  auto parts = PartitionByDevice(graph);
  EXPECT_THAT(Names(parts[kCpu0]), UnorderedElementsAre("a", "a/ctrl", "_send_edge_0_a"));
  const NodeDef& ctrl = Find(parts[kCpu0], "a/ctrl");
  EXPECT_EQ(ctrl.op(), "Const");
  EXPECT_THAT(Inputs(ctrl), ElementsAre("^a"));
  EXPECT_EQ(ctrl.attr().at("value").tensor().dtype(), "float");
  EXPECT_THAT(ctrl.attr().at("value").tensor().shape(), ElementsAre(0));
  EXPECT_THAT(Inputs(Find(parts[kCpu0], "_send_edge_0_a")), ElementsAre("a/ctrl:0"));

  EXPECT_THAT(Names(parts[kCpu1]),
              UnorderedElementsAre("b", "c", "_recv_edge_0_a", "_recv_edge_0_a/identity"));
  const NodeDef& identity = Find(parts[kCpu1], "_recv_edge_0_a/identity");
  EXPECT_EQ(identity.op(), "Identity");
  EXPECT_THAT(Inputs(identity), ElementsAre("_recv_edge_0_a:0"));
  ASSERT_TRUE(GetTypeAttr(identity, "T").ok());
  EXPECT_EQ(*GetTypeAttr(identity, "T"), DType::kFloat);
  EXPECT_THAT(Inputs(Find(parts[kCpu1], "b")), ElementsAre("^_recv_edge_0_a/identity"));
  EXPECT_THAT(Inputs(Find(parts[kCpu1], "c")), ElementsAre("^_recv_edge_0_a/identity"));
  // Every partition is a valid graph on its own.
  for (const auto& [device, part] : parts) EXPECT_TRUE(Graph::FromGraphDef(part).ok()) << device;
}

TEST(PartitionTest, Int32OnAGpuCrossesInHostMemory) {
  Graph graph = GraphBuilder()
                    .Const("i", kGpu0, "int32")
                    .Const("f", kGpu0, "float")
                    .Op("i2", "Identity", kGpu1, {"i:0"})
                    .Op("f2", "Identity", kGpu1, {"f:0"})
                    .Op("f3", "Identity", kCpu0, {"f:0"})
                    .Build();
  auto parts = PartitionByDevice(graph);
  EXPECT_EQ(Find(parts[kGpu0], "_send_edge_0_i").op(), "_HostSend");
  EXPECT_EQ(Find(parts[kGpu1], "_recv_edge_0_i").op(), "_HostRecv");
  EXPECT_EQ(*GetTypeAttr(Find(parts[kGpu1], "_recv_edge_0_i"), "tensor_type"), DType::kInt32);
  EXPECT_EQ(Find(parts[kGpu0], "_send_edge_1_f").op(), "_Send");
  EXPECT_EQ(Find(parts[kGpu1], "_recv_edge_1_f").op(), "_Recv");
  EXPECT_EQ(Find(parts[kCpu0], "_recv_edge_2_f").op(), "_Recv");
}

TEST(PartitionTest, ByWorkerKeepsAWorkersDevicesTogetherAndUsesItsIncarnation) {
  Graph graph = GraphBuilder()
                    .Const("a", kCpu0)
                    .Op("b", "Identity", kCpu1, {"a:0"})
                    .Op("c", "Identity", kTask1, {"b:0"})
                    .Build();
  PartitionOptions options;
  options.by = PartitionOptions::By::kWorker;
  options.incarnation = [](const DeviceName& device) -> uint64_t {
    return device.task == 0 ? 0xfeedface12345678 : 7;
  };
  auto parts = Partition(graph, options);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  const GraphDef& task0 = parts->at("/job:w/replica:0/task:0");
  EXPECT_THAT(Names(task0), UnorderedElementsAre("a", "b", "_send_edge_1_b"));
  const NodeDef& recv = Find(parts->at("/job:w/replica:0/task:1"), "_recv_edge_1_b");
  EXPECT_EQ(static_cast<uint64_t>(*GetIntAttr(recv, "send_device_incarnation")),
            0xfeedface12345678u);
  EXPECT_EQ(*SendRecvKey(recv),
            absl::StrCat(kCpu1, ";feedface12345678;", kTask1, ";edge_1_b;0:0"));
}

}  // namespace
}  // namespace rdv::graph
