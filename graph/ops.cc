#include "graph/ops.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph.h"

namespace rdv::graph {
namespace {

absl::StatusOr<DType> FirstInputType(const NodeDef&, const std::vector<DType>& types) {
  return types[0];
}

// Elementwise and matrix ops: both operands of one dtype.
absl::StatusOr<DType> SameTypeInputs(const NodeDef& node, const std::vector<DType>& types) {
  if (types[0] != types[1]) {
    return absl::InvalidArgumentError(
        absl::StrCat(NodeContext(node), "inputs are ", DTypeName(types[0]), " and ",
                     DTypeName(types[1]), "; both must be of one dtype"));
  }
  return types[0];
}

absl::StatusOr<DType> ConstType(const NodeDef& node, const std::vector<DType>&) {
  RDV_ASSIGN_OR_RETURN(const TensorValue* value, GetTensorAttr(node, "value"));
  absl::StatusOr<DType> dtype = DTypeFromName(value->dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(NodeContext(node), "attr 'value': ", dtype.status().message()));
  }
  return *dtype;
}

absl::StatusOr<DType> FillType(const NodeDef&, const std::vector<DType>& types) {
  return types[1];
}

absl::StatusOr<DType> CastType(const NodeDef& node, const std::vector<DType>&) {
  return GetTypeAttr(node, "DstT");
}

absl::StatusOr<DType> RecvType(const NodeDef& node, const std::vector<DType>&) {
  return GetTypeAttr(node, "tensor_type");
}

const std::map<std::string, OpSignature, std::less<>>& Ops() {
  static const auto* ops = new std::map<std::string, OpSignature, std::less<>>{
      {"Const", {0, 1, ConstType}},
      {"Identity", {1, 1, FirstInputType}},
      {"Add", {2, 1, SameTypeInputs}},
      {"Mul", {2, 1, SameTypeInputs}},
      {"MatMul", {2, 1, SameTypeInputs}},
      {"Sum", {2, 1, FirstInputType}},  // input, reduction axes
      {"Fill", {2, 1, FillType}},       // dims, value
      {"Cast", {1, 1, CastType}},
      {"NoOp", {0, 0, nullptr}},
      {"_Send", {1, 0, nullptr}},
      {"_HostSend", {1, 0, nullptr}},
      {"_Recv", {0, 1, RecvType}},
      {"_HostRecv", {0, 1, RecvType}},
  };
  return *ops;
}

}  // namespace

const OpSignature* FindOp(absl::string_view op) {
  auto it = Ops().find(op);
  return it == Ops().end() ? nullptr : &it->second;
}

std::string KnownOps() {
  std::vector<std::string> names;
  for (const auto& [name, signature] : Ops()) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

}  // namespace rdv::graph
