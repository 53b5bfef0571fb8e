#include "graph/graph.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "graph/ops.h"

namespace rdv::graph {
namespace {

absl::Status NodeError(const NodeDef& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(NodeContext(node), what));
}

absl::StatusOr<const AttrValue*> FindAttr(const NodeDef& node, absl::string_view name,
                                          AttrValue::ValueCase kind, absl::string_view kind_name) {
  auto it = node.attr().find(std::string(name));
  if (it == node.attr().end()) {
    return NodeError(node, absl::StrCat("attr '", name, "' is missing (want ", kind_name, ")"));
  }
  if (it->second.value_case() != kind) {
    return NodeError(node, absl::StrCat("attr '", name, "' is not ", kind_name));
  }
  return &it->second;
}

}  // namespace

std::string NodeContext(const NodeDef& node) {
  return absl::StrCat("node '", node.name(), "' (", node.op().empty() ? "no op" : node.op(),
                      "): ");
}

absl::StatusOr<std::string> GetStringAttr(const NodeDef& node, absl::string_view name) {
  RDV_ASSIGN_OR_RETURN(const AttrValue* value,
                       FindAttr(node, name, AttrValue::kS, "a string {\"s\": ...}"));
  return value->s();
}

absl::StatusOr<int64_t> GetIntAttr(const NodeDef& node, absl::string_view name) {
  RDV_ASSIGN_OR_RETURN(const AttrValue* value,
                       FindAttr(node, name, AttrValue::kI, "an integer {\"i\": ...}"));
  return value->i();
}

absl::StatusOr<bool> GetBoolAttr(const NodeDef& node, absl::string_view name,
                                 bool default_value) {
  if (!node.attr().contains(std::string(name))) return default_value;
  RDV_ASSIGN_OR_RETURN(const AttrValue* value,
                       FindAttr(node, name, AttrValue::kB, "a bool {\"b\": ...}"));
  return value->b();
}

absl::StatusOr<DType> GetTypeAttr(const NodeDef& node, absl::string_view name) {
  RDV_ASSIGN_OR_RETURN(const AttrValue* value,
                       FindAttr(node, name, AttrValue::kType, "a dtype {\"type\": ...}"));
  absl::StatusOr<DType> dtype = DTypeFromName(value->type());
  if (!dtype.ok()) {
    return NodeError(node, absl::StrCat("attr '", name, "': ", dtype.status().message()));
  }
  return *dtype;
}

absl::StatusOr<const TensorValue*> GetTensorAttr(const NodeDef& node, absl::string_view name) {
  RDV_ASSIGN_OR_RETURN(const AttrValue* value,
                       FindAttr(node, name, AttrValue::kTensor, "a tensor {\"tensor\": ...}"));
  return &value->tensor();
}

void SetStringAttr(NodeDef* node, const std::string& name, const std::string& value) {
  (*node->mutable_attr())[name].set_s(value);
}
void SetIntAttr(NodeDef* node, const std::string& name, int64_t value) {
  (*node->mutable_attr())[name].set_i(value);
}
void SetBoolAttr(NodeDef* node, const std::string& name, bool value) {
  (*node->mutable_attr())[name].set_b(value);
}
void SetTypeAttr(NodeDef* node, const std::string& name, DType value) {
  (*node->mutable_attr())[name].set_type(std::string(DTypeName(value)));
}

std::string DataInput(absl::string_view node, int slot) { return absl::StrCat(node, ":", slot); }
std::string ControlInput(absl::string_view node) { return absl::StrCat("^", node); }

absl::StatusOr<Graph> Graph::FromGraphDef(GraphDef def) {
  Graph graph;
  graph.def_ = std::move(def);
  RDV_RETURN_IF_ERROR(graph.Index());
  for (int i = 0; i < graph.num_nodes(); ++i) RDV_RETURN_IF_ERROR(graph.ParseInputs(i));
  RDV_RETURN_IF_ERROR(graph.Sort());
  RDV_RETURN_IF_ERROR(graph.InferTypes());
  return graph;
}

absl::StatusOr<Graph> Graph::FromJson(absl::string_view json) {
  GraphDef def;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &def);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph JSON does not parse: ", status.message().as_string()));
  }
  return FromGraphDef(std::move(def));
}

absl::StatusOr<Graph> Graph::FromJsonFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read graph file '", path, "'"));
  std::stringstream contents;
  contents << file.rdbuf();
  absl::StatusOr<Graph> graph = FromJson(contents.str());
  if (!graph.ok()) {
    return absl::Status(graph.status().code(),
                        absl::StrCat(path, ": ", graph.status().message()));
  }
  return graph;
}

std::string Graph::ToJson() const {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(def_, &json, options);
  return json;
}

std::optional<int> Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

absl::Status Graph::Index() {
  devices_.resize(num_nodes());
  for (int i = 0; i < num_nodes(); ++i) {
    const NodeDef& node = def_.node(i);
    if (node.name().empty()) return absl::InvalidArgumentError(absl::StrCat("node #", i, " has no name"));
    if (!by_name_.emplace(node.name(), i).second) {
      return NodeError(node, "the name is used by another node");
    }
    if (FindOp(node.op()) == nullptr) {
      return NodeError(node, absl::StrCat("field 'op': unknown op '", node.op(), "' (known: ",
                                          KnownOps(), ")"));
    }
    absl::StatusOr<DeviceName> device = DeviceName::Parse(node.device());
    if (!device.ok() || !device->IsFullySpecified()) {
      return NodeError(node, absl::StrCat("field 'device': '", node.device(),
                                          "' is not a full device name "
                                          "(/job:J/replica:R/task:T/device:TYPE:ID)"));
    }
    devices_[i] = *std::move(device);
  }
  return absl::OkStatus();
}

absl::Status Graph::ParseInputs(int i) {
  const NodeDef& node = def_.node(i);
  inputs_.resize(num_nodes());
  std::vector<Input>& inputs = inputs_[i];
  for (const std::string& text : node.input()) {
    Input input;
    absl::string_view name = text;
    if (absl::ConsumePrefix(&name, "^")) {
      input.control = true;
    } else {
      if (!inputs.empty() && inputs.back().control) {
        return NodeError(node, absl::StrCat("field 'input': data input '", text,
                                            "' after a control input"));
      }
      const size_t colon = name.rfind(':');
      if (colon != absl::string_view::npos) {
        if (!absl::SimpleAtoi(name.substr(colon + 1), &input.slot) || input.slot < 0) {
          return NodeError(node, absl::StrCat("field 'input': bad slot in '", text, "'"));
        }
        name = name.substr(0, colon);
      }
    }
    std::optional<int> source = FindNode(name);
    if (!source) {
      return NodeError(node, absl::StrCat("field 'input': '", text, "' names no node"));
    }
    input.node = *source;
    inputs.push_back(input);
  }
  int data_inputs = 0;
  for (const Input& input : inputs) data_inputs += input.control ? 0 : 1;
  const OpSignature* op = FindOp(node.op());
  if (data_inputs != op->num_data_inputs) {
    return NodeError(node, absl::StrCat("field 'input': ", node.op(), " takes ",
                                        op->num_data_inputs, " data inputs, got ", data_inputs));
  }
  return absl::OkStatus();
}

absl::Status Graph::Sort() {
  std::vector<int> pending(num_nodes());
  std::vector<std::vector<int>> consumers(num_nodes());
  for (int i = 0; i < num_nodes(); ++i) {
    pending[i] = static_cast<int>(inputs_[i].size());
    for (const Input& input : inputs_[i]) consumers[input.node].push_back(i);
  }
  for (int i = 0; i < num_nodes(); ++i) {
    if (pending[i] == 0) order_.push_back(i);
  }
  for (size_t next = 0; next < order_.size(); ++next) {
    for (int consumer : consumers[order_[next]]) {
      if (--pending[consumer] == 0) order_.push_back(consumer);
    }
  }
  if (static_cast<int>(order_.size()) == num_nodes()) return absl::OkStatus();
  for (int i = 0; i < num_nodes(); ++i) {
    if (pending[i] > 0) return NodeError(def_.node(i), "is on a cycle (or fed by one)");
  }
  return absl::InternalError("graph sort lost a node");
}

absl::Status Graph::InferTypes() {
  output_types_.resize(num_nodes());
  for (int i : order_) {
    const NodeDef& node = def_.node(i);
    std::vector<DType> input_types;
    for (const Input& input : inputs_[i]) {
      if (input.control) continue;
      if (input.slot >= num_outputs(input.node)) {
        return NodeError(node, absl::StrCat("field 'input': '", def_.node(input.node).name(),
                                            "' has ", num_outputs(input.node),
                                            " outputs, slot ", input.slot, " asked for"));
      }
      input_types.push_back(output_types_[input.node][input.slot]);
    }
    const OpSignature* op = FindOp(node.op());
    if (op->num_outputs == 0) continue;
    RDV_ASSIGN_OR_RETURN(const DType type, op->output_type(node, input_types));
    output_types_[i].assign(op->num_outputs, type);
  }
  return absl::OkStatus();
}

}  // namespace rdv::graph
