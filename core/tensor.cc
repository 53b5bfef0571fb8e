#include "core/tensor.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv {
namespace {

// Builds the strings in raw host memory; the buffer destroys them before
// giving the memory back.
absl::StatusOr<std::shared_ptr<Buffer>> AllocateStrings(std::shared_ptr<Allocator> allocator,
                                                        int64_t count, size_t bytes) {
  if (!allocator->Location().is_host()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "string tensors live in host memory; allocator '", allocator->Name(), "' is ",
        allocator->Location().ToString()));
  }
  if (bytes == 0) return Buffer::Wrap(nullptr, 0, allocator->Location(), nullptr);
  RDV_ASSIGN_OR_RETURN(void* data, allocator->Allocate(bytes));
  auto* strings = static_cast<std::string*>(data);
  for (int64_t i = 0; i < count; ++i) new (&strings[i]) std::string();
  const MemoryLocation location = allocator->Location();
  return Buffer::Wrap(data, bytes, location,
                      [allocator = std::move(allocator), strings, count, bytes]() {
                        for (int64_t i = 0; i < count; ++i) strings[i].~basic_string();
                        allocator->Deallocate(strings, bytes);
                      });
}

}  // namespace

absl::StatusOr<size_t> TensorBytes(DType dtype, int64_t num_elements) {
  const size_t element_size = DTypeSize(dtype);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", static_cast<int>(dtype), " is not a valid tensor dtype"));
  }
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(num_elements), element_size, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(num_elements, " elements of ",
                                                   DTypeName(dtype), " do not fit in memory"));
  }
  return bytes;
}

absl::StatusOr<Tensor> Tensor::Allocate(std::shared_ptr<Allocator> allocator, DType dtype,
                                        const TensorShape& shape) {
  RDV_ASSIGN_OR_RETURN(const size_t bytes, TensorBytes(dtype, shape.num_elements()));
  std::shared_ptr<Buffer> buffer;
  if (dtype == DType::kString) {
    RDV_ASSIGN_OR_RETURN(buffer, AllocateStrings(std::move(allocator), shape.num_elements(), bytes));
  } else {
    RDV_ASSIGN_OR_RETURN(buffer, Buffer::Allocate(std::move(allocator), bytes));
  }
  return Tensor(dtype, shape, std::move(buffer));
}

absl::StatusOr<Tensor> Tensor::FromBuffer(DType dtype, const TensorShape& shape,
                                          std::shared_ptr<Buffer> buffer) {
  RDV_ASSIGN_OR_RETURN(const size_t bytes, TensorBytes(dtype, shape.num_elements()));
  if (buffer == nullptr) return absl::InvalidArgumentError("Tensor::FromBuffer: null buffer");
  if (buffer->size() < bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", DTypeName(dtype), " tensor of shape ", shape.DebugString(), " needs ", bytes,
        " bytes; the buffer holds ", buffer->size()));
  }
  if (dtype == DType::kString && !buffer->location().is_host()) {
    return absl::InvalidArgumentError("string tensors live in host memory");
  }
  return Tensor(dtype, shape, std::move(buffer));
}

size_t Tensor::TotalBytes() const {
  // Valid by construction: Allocate/FromBuffer checked the product.
  return static_cast<size_t>(shape_.num_elements()) * DTypeSize(dtype_);
}

std::string Tensor::DebugString() const {
  if (!IsInitialized()) return "Tensor<uninitialized>";
  return absl::StrCat("Tensor<", DTypeName(dtype_), " ", shape_.DebugString(), " ",
                      location().ToString(), ">");
}

}  // namespace rdv
