#include "graph/partition.h"

#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/rendezvous_key.h"
#include "graph/ops.h"

namespace rdv::graph {
namespace {

class Partitioner {
 public:
  Partitioner(const Graph& graph, const PartitionOptions& options)
      : graph_(graph), options_(options) {}

  std::map<std::string, GraphDef> Run() {
    int edge_id = 0;
    for (int i = 0; i < graph_.num_nodes(); ++i) {
      NodeDef copy = graph_.node(i);
      copy.clear_input();
      for (const Input& input : graph_.inputs(i)) {
        copy.add_input(Rewire(input, i, edge_id++));
      }
      *parts_[PartOf(i)].add_node() = std::move(copy);
    }
    return std::move(parts_);
  }

 private:
  std::string PartOf(int node) const {
    const DeviceName& device = graph_.device(node);
    return options_.by == PartitionOptions::By::kWorker ? device.WorkerName() : device.ToString();
  }

  // The input `input` of node `consumer` as its partition sees it.
  std::string Rewire(const Input& input, int consumer, int edge_id) {
    const std::string& source = graph_.node(input.node).name();
    if (PartOf(input.node) == PartOf(consumer)) {
      return input.control ? ControlInput(source) : DataInput(source, input.slot);
    }
    return input.control ? ControlInput(ControlRecv(input.node, consumer, edge_id))
                         : DataInput(DataRecv(input, consumer, edge_id), 0);
  }

  // The _Recv (in the consumer's partition) of an output, made once per
  // partition and memory space.
  std::string DataRecv(const Input& input, int consumer, int edge_id) {
    const DType dtype = graph_.output_type(input.node, input.slot);
    const DeviceName& destination = graph_.device(consumer);
    const bool on_host = !destination.IsGpu() || dtype == DType::kInt32;
    const std::string space = on_host ? "host" : destination.ToString();
    auto [it, inserted] = data_recvs_.try_emplace(
        std::make_tuple(input.node, input.slot, PartOf(consumer), space));
    if (!inserted) return it->second;
    const std::string tensor_name = TensorName(input.node, edge_id);
    const bool host_send = graph_.device(input.node).IsGpu() && dtype == DType::kInt32;
    AddSend(input.node, DataInput(graph_.node(input.node).name(), input.slot), tensor_name,
            consumer, dtype, host_send ? "_HostSend" : "_Send");
    it->second = AddRecv(input.node, consumer, tensor_name, dtype,
                         destination.IsGpu() && on_host ? "_HostRecv" : "_Recv")
                     ->name();
    return it->second;
  }

  // The Identity (in the consumer's partition) that stands for a control
  // edge from `source`, made once per partition.
  std::string ControlRecv(int source, int consumer, int edge_id) {
    auto [it, inserted] = control_recvs_.try_emplace(std::make_pair(source, PartOf(consumer)));
    if (!inserted) return it->second;
    const std::string tensor_name = TensorName(source, edge_id);
    AddSend(source, DataInput(ControlConst(source), 0), tensor_name, consumer, DType::kFloat,
            "_Send");
    const NodeDef* recv = AddRecv(source, consumer, tensor_name, DType::kFloat, "_Recv");
    NodeDef* identity = parts_[PartOf(consumer)].add_node();
    identity->set_name(absl::StrCat(recv->name(), "/identity"));
    identity->set_op("Identity");
    identity->set_device(graph_.node(consumer).device());
    identity->add_input(DataInput(recv->name(), 0));
    SetTypeAttr(identity, "T", DType::kFloat);  // as TensorFlow's partitioner sets it
    it->second = identity->name();
    return it->second;
  }

  // "<source>/ctrl": an empty float constant that runs after `source`.
  std::string ControlConst(int source) {
    const std::string name = absl::StrCat(graph_.node(source).name(), "/ctrl");
    if (!control_consts_.insert(source).second) return name;
    NodeDef* node = parts_[PartOf(source)].add_node();
    node->set_name(name);
    node->set_op("Const");
    node->set_device(graph_.node(source).device());
    node->add_input(ControlInput(graph_.node(source).name()));
    TensorValue* value = (*node->mutable_attr())["value"].mutable_tensor();
    value->set_dtype("float");
    value->add_shape(0);
    SetTypeAttr(node, "dtype", DType::kFloat);
    return name;
  }

  std::string TensorName(int source, int edge_id) const {
    return absl::StrCat("edge_", edge_id, "_", graph_.node(source).name());
  }

  void SetKeyAttrs(NodeDef* node, int source, int consumer, const std::string& tensor_name) {
    const DeviceName& send_device = graph_.device(source);
    SetStringAttr(node, "tensor_name", tensor_name);
    // The devices as assigned, legacy spellings ("/cpu:0") too: TensorFlow's
    // keys carry them so.
    SetStringAttr(node, "send_device", graph_.node(source).device());
    SetIntAttr(node, "send_device_incarnation",
               static_cast<int64_t>(options_.incarnation ? options_.incarnation(send_device) : 1));
    SetStringAttr(node, "recv_device", graph_.node(consumer).device());
    SetBoolAttr(node, "client_terminated", false);
  }

  void AddSend(int source, const std::string& input, const std::string& tensor_name,
               int consumer, DType dtype, const char* op) {
    NodeDef* send = parts_[PartOf(source)].add_node();
    send->set_name(absl::StrCat("_send_", tensor_name));
    send->set_op(op);
    send->set_device(graph_.node(source).device());
    send->add_input(input);
    SetKeyAttrs(send, source, consumer, tensor_name);
    SetTypeAttr(send, "T", dtype);
  }

  const NodeDef* AddRecv(int source, int consumer, const std::string& tensor_name, DType dtype,
                         const char* op) {
    NodeDef* recv = parts_[PartOf(consumer)].add_node();
    recv->set_name(absl::StrCat("_recv_", tensor_name));
    recv->set_op(op);
    recv->set_device(graph_.node(consumer).device());
    SetKeyAttrs(recv, source, consumer, tensor_name);
    SetTypeAttr(recv, "tensor_type", dtype);
    return recv;
  }

  const Graph& graph_;
  const PartitionOptions& options_;
  std::map<std::string, GraphDef> parts_;
  // (source, slot, destination partition, memory space) -> _Recv name.
  std::map<std::tuple<int, int, std::string, std::string>, std::string> data_recvs_;
  // (source, destination partition) -> Identity name.
  std::map<std::pair<int, std::string>, std::string> control_recvs_;
  std::set<int> control_consts_;
};

}  // namespace

absl::StatusOr<std::map<std::string, GraphDef>> Partition(const Graph& graph,
                                                          const PartitionOptions& options) {
  return Partitioner(graph, options).Run();
}

absl::StatusOr<std::string> SendRecvKey(const NodeDef& node) {
  if (!IsSend(node.op()) && !IsRecv(node.op())) {
    return absl::InvalidArgumentError(absl::StrCat(NodeContext(node), "is not a _Send or _Recv"));
  }
  RDV_ASSIGN_OR_RETURN(const std::string send_device, GetStringAttr(node, "send_device"));
  RDV_ASSIGN_OR_RETURN(const int64_t incarnation, GetIntAttr(node, "send_device_incarnation"));
  RDV_ASSIGN_OR_RETURN(const std::string recv_device, GetStringAttr(node, "recv_device"));
  RDV_ASSIGN_OR_RETURN(const std::string tensor_name, GetStringAttr(node, "tensor_name"));
  return CreateRendezvousKey(send_device, static_cast<uint64_t>(incarnation), recv_device,
                             tensor_name);
}

}  // namespace rdv::graph
