#include "pytorch/tensors.h"

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "control/worker_server.h"
#include "core/buffer.h"
#include "core/memory.h"

namespace rdv::pytorch {

namespace {

// A contiguous tensor by `copier`, a strided one by torch.
void CopyForSend(const at::Tensor& tensor, Tensor& staging, SplitCopier& copier) {
  if (tensor.is_contiguous()) {
    copier.Copy(staging.data(), tensor.data_ptr(), tensor.nbytes());
    return;
  }
  at::from_blob(staging.data(), tensor.sizes(), tensor.options()).copy_(tensor);
}

// `bytes` of host memory at `data`, kept alive by `owner`, as an rdv tensor
// of `dtype` and `shape`. When rdv lets go of it, `owner` goes first, then
// `released` runs.
template <typename Owner>
absl::StatusOr<Tensor> HeldBy(Owner owner, void* data, size_t bytes, DType dtype,
                              const TensorShape& shape, absl::AnyInvocable<void() &&> released) {
  auto buffer = Buffer::Wrap(data, bytes, MemoryLocation::Host(),
                             [keep = std::move(owner), released = std::move(released)]() mutable {
                               keep = Owner();
                               std::move(released)();
                             });
  return Tensor::FromBuffer(dtype, shape, std::move(buffer));
}

}  // namespace

absl::StatusOr<Tensor> HoldUntilReleased(Tensor staging, absl::AnyInvocable<void() &&> released) {
  void* data = staging.data();
  const size_t bytes = staging.TotalBytes();
  const DType dtype = staging.dtype();
  const TensorShape shape = staging.shape();
  return HeldBy(std::move(staging), data, bytes, dtype, shape, std::move(released));
}

absl::StatusOr<DType> DTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kFloat;
    case at::kDouble: return DType::kDouble;
    case at::kHalf: return DType::kHalf;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kByte: return DType::kUInt8;
    case at::kChar: return DType::kInt8;
    case at::kShort: return DType::kInt16;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    case at::kBool: return DType::kBool;
    case at::kComplexFloat: return DType::kComplex64;
    case at::kComplexDouble: return DType::kComplex128;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "torch dtype ", c10::toString(type),
          " has no rdv dtype (rdv moves bool, uint8, int8-64, float16/32/64, bfloat16 and "
          "complex64/128)"));
  }
}

std::string Describe(const at::Tensor& tensor) {
  const auto dtype = DTypeOf(tensor.scalar_type());
  return absl::StrCat(dtype.ok() ? DTypeName(*dtype) : c10::toString(tensor.scalar_type()), " [",
                      absl::StrJoin(tensor.sizes(), ","), "] (", tensor.nbytes(), " bytes)");
}

std::string Describe(const Tensor& tensor) {
  return absl::StrCat(DTypeName(tensor.dtype()), " ", tensor.shape().DebugString(), " (",
                      tensor.TotalBytes(), " bytes)");
}

absl::StatusOr<TensorShape> ShapeOf(const at::Tensor& tensor) {
  const std::vector<int64_t> dims(tensor.sizes().begin(), tensor.sizes().end());
  return TensorShape::Create(dims);
}

absl::StatusOr<Tensor> WrapForSend(const at::Tensor& tensor,
                                   absl::AnyInvocable<void() &&> released) {
  RDV_ASSIGN_OR_RETURN(const DType dtype, DTypeOf(tensor.scalar_type()));
  RDV_ASSIGN_OR_RETURN(const TensorShape shape, ShapeOf(tensor));
  return HeldBy(tensor, tensor.data_ptr(), tensor.nbytes(), dtype, shape, std::move(released));
}

absl::StatusOr<std::optional<Tensor>> StageForSend(const at::Tensor& tensor,
                                                   control::WorkerServer& server,
                                                   SplitCopier& copier) {
  if (tensor.nbytes() < kStageFromBytes) return std::nullopt;
  RDV_ASSIGN_OR_RETURN(const DType dtype, DTypeOf(tensor.scalar_type()));
  RDV_ASSIGN_OR_RETURN(const TensorShape shape, ShapeOf(tensor));
  std::optional<Tensor> staging = server.AllocatePeerReadable(dtype, shape);
  if (staging.has_value()) CopyForSend(tensor, *staging, copier);
  return staging;
}

std::shared_ptr<Buffer> LandingOf(const at::Tensor& destination) {
  if (!destination.is_contiguous() || destination.nbytes() == 0) return nullptr;
  return Buffer::Wrap(destination.data_ptr(), destination.nbytes(), MemoryLocation::Host(),
                      [keep = destination]() mutable { keep = at::Tensor(); });
}

absl::Status CopyReceived(const Tensor& value, at::Tensor& destination) {
  RDV_ASSIGN_OR_RETURN(const DType expected, DTypeOf(destination.scalar_type()));
  const size_t bytes = value.TotalBytes();
  if (value.dtype() != expected || bytes != destination.nbytes()) {
    return absl::InvalidArgumentError(absl::StrCat("the sender sent ", Describe(value),
                                                   "; the receiving tensor is ",
                                                   Describe(destination)));
  }
  if (bytes == 0 || value.data() == destination.data_ptr()) return absl::OkStatus();
  if (destination.is_contiguous()) {
    std::memcpy(destination.data_ptr(), value.data(), bytes);
    return absl::OkStatus();
  }
  at::Tensor contiguous = at::empty_like(destination, at::MemoryFormat::Contiguous);
  std::memcpy(contiguous.data_ptr(), value.data(), bytes);
  destination.copy_(contiguous);
  return absl::OkStatus();
}

}  // namespace rdv::pytorch
