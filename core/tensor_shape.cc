#include "core/tensor_shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdv {

absl::StatusOr<TensorShape> TensorShape::Create(absl::Span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape has rank ", dims.size(), "; the most rdv allows is ", kMaxRank));
  }
  TensorShape shape;
  for (const int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(dims, ","), "] has a negative dimension"));
    }
    int64_t product = 0;
    if (__builtin_mul_overflow(shape.num_elements_, d, &product)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(dims, ","), "] has more elements than fit in int64"));
    }
    shape.num_elements_ = product;
  }
  shape.dims_.assign(dims.begin(), dims.end());
  return shape;
}

std::string TensorShape::DebugString() const {
  return absl::StrCat("[", absl::StrJoin(dims_, ","), "]");
}

}  // namespace rdv
