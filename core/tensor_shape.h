// The dimensions of a tensor. Always valid: every dimension >= 0, rank at
// most kMaxRank, and the element count fits in int64 (Create checks).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "core/status.h"

namespace rdv {

class TensorShape {
 public:
  static constexpr int kMaxRank = 254;

  // A scalar: rank 0, one element.
  TensorShape() = default;

  static absl::StatusOr<TensorShape> Create(absl::Span<const int64_t> dims);
  static absl::StatusOr<TensorShape> Create(std::initializer_list<int64_t> dims) {
    return Create(absl::MakeConstSpan(dims.begin(), dims.size()));
  }

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  absl::Span<const int64_t> dims() const { return dims_; }
  int64_t num_elements() const { return num_elements_; }

  // "[2,3]"; "[]" for a scalar.
  std::string DebugString() const;

  friend bool operator==(const TensorShape& a, const TensorShape& b) { return a.dims_ == b.dims_; }

 private:
  absl::InlinedVector<int64_t, 4> dims_;
  int64_t num_elements_ = 1;
};

}  // namespace rdv
