// A validated dataflow graph over a GraphDef (graph/graph.proto): every
// node has a unique name, a known op, a fully named device and inputs that
// name existing nodes and outputs; the graph has no cycle; every output's
// dtype is known. Errors name the node and the field. Immutable once built;
// safe to share between threads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "core/device_name.h"
#include "core/dtype.h"
#include "core/status.h"
#include "rdv/graph/graph.pb.h"

namespace rdv::graph {

// One input of a node: output `slot` of node `node`, or a control edge.
struct Input {
  int node = -1;
  int slot = 0;
  bool control = false;
};

class Graph {
 public:
  static absl::StatusOr<Graph> FromGraphDef(GraphDef def);
  // JSON as protobuf maps GraphDef (see examples/): {"node": [{"name": ...,
  // "op": ..., "device": ..., "input": [...], "attr": {...}}]}.
  static absl::StatusOr<Graph> FromJson(absl::string_view json);
  static absl::StatusOr<Graph> FromJsonFile(const std::string& path);
  std::string ToJson() const;

  const GraphDef& def() const { return def_; }
  int num_nodes() const { return def_.node_size(); }
  const NodeDef& node(int i) const { return def_.node(i); }
  const DeviceName& device(int i) const { return devices_[i]; }
  // Data inputs first, then control inputs, in the NodeDef's order.
  const std::vector<Input>& inputs(int i) const { return inputs_[i]; }
  DType output_type(int i, int slot) const { return output_types_[i][slot]; }
  int num_outputs(int i) const { return static_cast<int>(output_types_[i].size()); }
  // Every node after all of its inputs.
  const std::vector<int>& topological_order() const { return order_; }
  std::optional<int> FindNode(absl::string_view name) const;

 private:
  Graph() = default;
  absl::Status Index();
  absl::Status ParseInputs(int i);
  absl::Status Sort();
  absl::Status InferTypes();

  GraphDef def_;
  absl::flat_hash_map<std::string, int> by_name_;
  std::vector<DeviceName> devices_;
  std::vector<std::vector<Input>> inputs_;
  std::vector<std::vector<DType>> output_types_;
  std::vector<int> order_;
};

// "node 'x' (MatMul): <what>", the prefix of every error about a node.
std::string NodeContext(const NodeDef& node);

// Typed attribute access; INVALID_ARGUMENT naming the node and the attr
// when it is missing or of another kind.
absl::StatusOr<std::string> GetStringAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<int64_t> GetIntAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<bool> GetBoolAttr(const NodeDef& node, absl::string_view name,
                                 bool default_value);
absl::StatusOr<DType> GetTypeAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<const TensorValue*> GetTensorAttr(const NodeDef& node, absl::string_view name);

void SetStringAttr(NodeDef* node, const std::string& name, const std::string& value);
void SetIntAttr(NodeDef* node, const std::string& name, int64_t value);
void SetBoolAttr(NodeDef* node, const std::string& name, bool value);
void SetTypeAttr(NodeDef* node, const std::string& name, DType value);

// Inputs as NodeDef spells them.
std::string DataInput(absl::string_view node, int slot);
std::string ControlInput(absl::string_view node);

}  // namespace rdv::graph
