// A typed, shaped view of a Buffer. Copying a Tensor shares the buffer (no
// bytes move); the buffer lives while any copy does. A default-constructed
// Tensor is uninitialized (dtype kInvalid, no buffer).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/tensor_shape.h"

namespace rdv {

class Tensor {
 public:
  Tensor() = default;

  // A new tensor whose elements come from `allocator`. Numeric elements are
  // left uninitialized; string elements are empty strings, and string
  // tensors must be allocated in host memory.
  static absl::StatusOr<Tensor> Allocate(std::shared_ptr<Allocator> allocator, DType dtype,
                                         const TensorShape& shape);

  // A tensor over an existing buffer, which must hold at least
  // TotalBytes() and, for strings, constructed std::string elements.
  static absl::StatusOr<Tensor> FromBuffer(DType dtype, const TensorShape& shape,
                                           std::shared_ptr<Buffer> buffer);

  bool IsInitialized() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t TotalBytes() const;

  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  // Null for an empty or uninitialized tensor.
  void* data() const { return buffer_ ? buffer_->data() : nullptr; }
  MemoryLocation location() const {
    return buffer_ ? buffer_->location() : MemoryLocation::Host();
  }

  // Typed element access for host tensors. T must match dtype().
  template <typename T>
  T* flat() const {
    return static_cast<T*>(data());
  }

  // "Tensor<float [2,3] host>".
  std::string DebugString() const;

 private:
  Tensor(DType dtype, TensorShape shape, std::shared_ptr<Buffer> buffer)
      : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)) {}

  DType dtype_ = DType::kInvalid;
  TensorShape shape_;
  std::shared_ptr<Buffer> buffer_;
};

// Bytes that `num_elements` elements of `dtype` take, or INVALID_ARGUMENT
// when that does not fit in size_t.
absl::StatusOr<size_t> TensorBytes(DType dtype, int64_t num_elements);

}  // namespace rdv
