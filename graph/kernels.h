// CPU kernels of the ops in graph/ops.h (all but _Send, _Recv and NoOp,
// which the executor runs itself): Const, Identity, Add, Mul (same shapes,
// or one side a scalar), MatMul (2-D, transpose_a/transpose_b), Sum (axes
// as a second input, keep_dims), Fill (dims, value) and Cast (DstT), on
// float, double, int32 and int64 (Cast also bool and uint8). Inputs and
// outputs are host tensors; outputs come from the host allocator.
// A kernel's error is INVALID_ARGUMENT naming the node and what is wrong
// (shapes that do not fit, a dtype it has no kernel for).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "rdv/graph/graph.pb.h"

namespace rdv::graph {

absl::StatusOr<Tensor> RunCpuKernel(const NodeDef& node, DType output_type,
                                    const std::vector<Tensor>& inputs);

// A constant's tensor: fewer values than elements repeat the last one.
absl::StatusOr<Tensor> TensorFromValue(const TensorValue& value);

// Prints a host tensor for people: "float [2,2] {1, 2, 3, 4}" (at most
// `max_elements` values, then "...").
std::string TensorSummary(const Tensor& tensor, int max_elements = 16);

}  // namespace rdv::graph
