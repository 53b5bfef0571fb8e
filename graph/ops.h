// The ops a graph may use: how many data inputs each takes, how many
// outputs it has and of what dtype. graph/kernels.h computes them.
#pragma once

#include <vector>

#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/status.h"
#include "rdv/graph/graph.pb.h"

namespace rdv::graph {

struct OpSignature {
  int num_data_inputs = 0;
  int num_outputs = 0;
  // The dtype of every output, from the node's attrs and its inputs'
  // dtypes (already checked to be num_data_inputs long).
  absl::StatusOr<DType> (*output_type)(const NodeDef& node,
                                       const std::vector<DType>& input_types) = nullptr;
};

// Null for an op rdv does not know.
const OpSignature* FindOp(absl::string_view op);

// "Add, Cast, Const, ...", for errors.
std::string KnownOps();

inline bool IsSend(absl::string_view op) { return op == "_Send" || op == "_HostSend"; }
inline bool IsRecv(absl::string_view op) { return op == "_Recv" || op == "_HostRecv"; }

}  // namespace rdv::graph
