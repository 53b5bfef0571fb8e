#include "graph/kernels.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph.h"

namespace rdv::graph {
namespace {

absl::Status KernelError(const NodeDef& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(NodeContext(node), what));
}

absl::StatusOr<Tensor> NewTensor(DType dtype, absl::Span<const int64_t> dims) {
  RDV_ASSIGN_OR_RETURN(TensorShape shape, TensorShape::Create(dims));
  return Tensor::Allocate(HostAllocator(), dtype, shape);
}

// Calls fn(T{}) with T the C++ type of `dtype`, for the arithmetic dtypes.
template <typename Fn>
absl::Status ForArithmetic(const NodeDef& node, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat: return fn(float{});
    case DType::kDouble: return fn(double{});
    case DType::kInt32: return fn(int32_t{});
    case DType::kInt64: return fn(int64_t{});
    default:
      return KernelError(node, absl::StrCat("no kernel for dtype ", DTypeName(dtype)));
  }
}

// ForArithmetic plus the types Cast also converts.
template <typename Fn>
absl::Status ForCastable(const NodeDef& node, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kBool: return fn(bool{});
    case DType::kUInt8: return fn(uint8_t{});
    default: return ForArithmetic(node, dtype, fn);
  }
}

absl::StatusOr<std::vector<int64_t>> IntValues(const NodeDef& node, const Tensor& tensor,
                                               absl::string_view what) {
  std::vector<int64_t> values;
  if (tensor.shape().rank() > 1) {
    return KernelError(node, absl::StrCat(what, " must be a scalar or 1-D, is ",
                                          tensor.shape().DebugString()));
  }
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    if (tensor.dtype() == DType::kInt32) {
      values.push_back(tensor.flat<int32_t>()[i]);
    } else if (tensor.dtype() == DType::kInt64) {
      values.push_back(tensor.flat<int64_t>()[i]);
    } else {
      return KernelError(node, absl::StrCat(what, " must be int32 or int64, is ",
                                            DTypeName(tensor.dtype())));
    }
  }
  return values;
}

absl::StatusOr<Tensor> Elementwise(const NodeDef& node, const Tensor& a, const Tensor& b,
                                   bool multiply) {
  const bool same = a.shape() == b.shape();
  if (!same && a.num_elements() != 1 && b.num_elements() != 1) {
    return KernelError(node, absl::StrCat("shapes ", a.shape().DebugString(), " and ",
                                          b.shape().DebugString(),
                                          " do not match (and neither is a scalar)"));
  }
  const Tensor& larger = a.num_elements() >= b.num_elements() && (same || b.num_elements() == 1)
                             ? a
                             : b;
  RDV_ASSIGN_OR_RETURN(Tensor out, NewTensor(a.dtype(), larger.shape().dims()));
  RDV_RETURN_IF_ERROR(ForArithmetic(node, a.dtype(), [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    const T* x = a.flat<T>();
    const T* y = b.flat<T>();
    T* z = out.flat<T>();
    const int64_t step_x = a.num_elements() == 1 ? 0 : 1;
    const int64_t step_y = b.num_elements() == 1 ? 0 : 1;
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      z[i] = multiply ? static_cast<T>(x[i * step_x] * y[i * step_y])
                      : static_cast<T>(x[i * step_x] + y[i * step_y]);
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<Tensor> MatMul(const NodeDef& node, const Tensor& a, const Tensor& b) {
  RDV_ASSIGN_OR_RETURN(const bool transpose_a, GetBoolAttr(node, "transpose_a", false));
  RDV_ASSIGN_OR_RETURN(const bool transpose_b, GetBoolAttr(node, "transpose_b", false));
  if (a.shape().rank() != 2 || b.shape().rank() != 2) {
    return KernelError(node, absl::StrCat("inputs must be matrices, are ", a.shape().DebugString(),
                                          " and ", b.shape().DebugString()));
  }
  const int64_t m = a.shape().dim(transpose_a ? 1 : 0);
  const int64_t k = a.shape().dim(transpose_a ? 0 : 1);
  const int64_t k_b = b.shape().dim(transpose_b ? 1 : 0);
  const int64_t n = b.shape().dim(transpose_b ? 0 : 1);
  if (k != k_b) {
    return KernelError(node, absl::StrCat("shapes ", a.shape().DebugString(), " and ",
                                          b.shape().DebugString(), " cannot be multiplied (",
                                          k, " != ", k_b, ")"));
  }
  RDV_ASSIGN_OR_RETURN(Tensor out, NewTensor(a.dtype(), {m, n}));
  RDV_RETURN_IF_ERROR(ForArithmetic(node, a.dtype(), [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    const T* x = a.flat<T>();
    const T* y = b.flat<T>();
    T* z = out.flat<T>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T sum{};
        for (int64_t p = 0; p < k; ++p) {
          const T left = transpose_a ? x[p * m + i] : x[i * k + p];
          const T right = transpose_b ? y[j * k + p] : y[p * n + j];
          sum = static_cast<T>(sum + left * right);
        }
        z[i * n + j] = sum;
      }
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<Tensor> Sum(const NodeDef& node, const Tensor& input, const Tensor& axes_tensor) {
  RDV_ASSIGN_OR_RETURN(const bool keep_dims, GetBoolAttr(node, "keep_dims", false));
  RDV_ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntValues(node, axes_tensor, "the axes"));
  const int rank = input.shape().rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      return KernelError(node, absl::StrCat("axis ", axis, " is out of range for shape ",
                                            input.shape().DebugString()));
    }
    reduced[static_cast<size_t>(axis < 0 ? axis + rank : axis)] = true;
  }
  std::vector<int64_t> out_dims;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out_dims.push_back(input.shape().dim(d));
    } else if (keep_dims) {
      out_dims.push_back(1);
    }
  }
  RDV_ASSIGN_OR_RETURN(Tensor out, NewTensor(input.dtype(), out_dims));
  RDV_RETURN_IF_ERROR(ForArithmetic(node, input.dtype(), [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    T* z = out.flat<T>();
    std::fill(z, z + out.num_elements(), T{});
    const T* x = input.flat<T>();
    std::vector<int64_t> index(rank, 0);
    for (int64_t i = 0; i < input.num_elements(); ++i) {
      int64_t target = 0;
      for (int d = 0; d < rank; ++d) {
        if (!reduced[d]) target = target * input.shape().dim(d) + index[d];
      }
      z[target] = static_cast<T>(z[target] + x[i]);
      for (int d = rank - 1; d >= 0 && ++index[d] == input.shape().dim(d); --d) index[d] = 0;
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<Tensor> Fill(const NodeDef& node, const Tensor& dims_tensor, const Tensor& value) {
  RDV_ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntValues(node, dims_tensor, "dims"));
  if (value.num_elements() != 1) {
    return KernelError(node, absl::StrCat("the value must be a scalar, is ",
                                          value.shape().DebugString()));
  }
  absl::StatusOr<Tensor> out = NewTensor(value.dtype(), dims);
  if (!out.ok()) return KernelError(node, out.status().message());
  RDV_RETURN_IF_ERROR(ForArithmetic(node, value.dtype(), [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    std::fill(out->flat<T>(), out->flat<T>() + out->num_elements(), value.flat<T>()[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<Tensor> Cast(const NodeDef& node, DType to, const Tensor& input) {
  RDV_ASSIGN_OR_RETURN(Tensor out, NewTensor(to, input.shape().dims()));
  RDV_RETURN_IF_ERROR(ForCastable(node, input.dtype(), [&](auto from_zero) -> absl::Status {
    using From = decltype(from_zero);
    return ForCastable(node, to, [&](auto to_zero) -> absl::Status {
      using To = decltype(to_zero);
      const From* x = input.flat<From>();
      To* z = out.flat<To>();
      for (int64_t i = 0; i < input.num_elements(); ++i) z[i] = static_cast<To>(x[i]);
      return absl::OkStatus();
    });
  }));
  return out;
}

}  // namespace

absl::StatusOr<Tensor> TensorFromValue(const TensorValue& value) {
  RDV_ASSIGN_OR_RETURN(const DType dtype, DTypeFromName(value.dtype()));
  RDV_ASSIGN_OR_RETURN(Tensor out, NewTensor(dtype, value.shape()));
  const bool floating = dtype == DType::kFloat || dtype == DType::kDouble;
  const int count = floating ? value.floats_size() : value.ints_size();
  if ((floating ? value.ints_size() : value.floats_size()) > 0) {
    return absl::InvalidArgumentError(absl::StrCat("a ", DTypeName(dtype), " constant takes its ",
                                                   "values in '", floating ? "floats" : "ints",
                                                   "'"));
  }
  if (count > out.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(count, " values for ", out.num_elements(),
                                                   " elements"));
  }
  NodeDef context;
  context.set_name("constant");
  RDV_RETURN_IF_ERROR(ForCastable(context, dtype, [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    T* z = out.flat<T>();
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      const int source = static_cast<int>(std::min<int64_t>(i, count - 1));
      z[i] = count == 0 ? T{}
             : floating ? static_cast<T>(value.floats(source))
                        : static_cast<T>(value.ints(source));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<Tensor> RunCpuKernel(const NodeDef& node, DType output_type,
                                    const std::vector<Tensor>& inputs) {
  const std::string& op = node.op();
  if (op == "Const") {
    RDV_ASSIGN_OR_RETURN(const TensorValue* value, GetTensorAttr(node, "value"));
    absl::StatusOr<Tensor> tensor = TensorFromValue(*value);
    if (!tensor.ok()) return KernelError(node, absl::StrCat("attr 'value': ", tensor.status().message()));
    return tensor;
  }
  if (op == "Identity") return inputs[0];
  if (op == "Add" || op == "Mul") return Elementwise(node, inputs[0], inputs[1], op == "Mul");
  if (op == "MatMul") return MatMul(node, inputs[0], inputs[1]);
  if (op == "Sum") return Sum(node, inputs[0], inputs[1]);
  if (op == "Fill") return Fill(node, inputs[0], inputs[1]);
  if (op == "Cast") return Cast(node, output_type, inputs[0]);
  return absl::UnimplementedError(absl::StrCat(NodeContext(node), "has no CPU kernel"));
}

std::string TensorSummary(const Tensor& tensor, int max_elements) {
  std::vector<std::string> values;
  NodeDef context;
  const int64_t shown = std::min<int64_t>(tensor.num_elements(), max_elements);
  const absl::Status status = ForCastable(context, tensor.dtype(), [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    for (int64_t i = 0; i < shown; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        values.push_back(absl::StrCat(tensor.flat<T>()[i]));
      } else {
        values.push_back(absl::StrCat(static_cast<int64_t>(tensor.flat<T>()[i])));
      }
    }
    return absl::OkStatus();
  });
  if (!status.ok()) values = {"?"};
  if (tensor.num_elements() > shown) values.push_back("...");
  return absl::StrCat(DTypeName(tensor.dtype()), " ", tensor.shape().DebugString(), " {",
                      absl::StrJoin(values, ", "), "}");
}

}  // namespace rdv::graph
