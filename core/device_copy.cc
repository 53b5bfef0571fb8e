#include "core/device_copy.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda.h"
#include "core/notification.h"

namespace rdv {
namespace {

absl::StatusOr<std::shared_ptr<Allocator>> AllocatorFor(MemoryLocation location) {
  if (location.kind == MemoryKind::kCudaDevice) return cuda::DeviceAllocator(location.device);
  return cuda::PinnedHostAllocator();
}

// Copies a pageable host tensor into pinned memory, where DMA can read it.
absl::StatusOr<Tensor> StageInPinnedMemory(const Tensor& src) {
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> pinned, cuda::PinnedHostAllocator());
  RDV_ASSIGN_OR_RETURN(Tensor staged, Tensor::Allocate(std::move(pinned), src.dtype(), src.shape()));
  if (src.TotalBytes() > 0) std::memcpy(staged.data(), src.data(), src.TotalBytes());
  return staged;
}

}  // namespace

void CopyTensorAsync(const Tensor& src, MemoryLocation dst, CopyTensorDone done) {
  if (!DTypeIsMemcpyable(src.dtype())) {
    std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "Non-DMA-safe ", DTypeName(src.dtype()), " tensor may not be copied from ",
        src.location().ToString(), " to ", dst.ToString())));
    return;
  }
  absl::StatusOr<std::shared_ptr<Allocator>> allocator = AllocatorFor(dst);
  absl::StatusOr<Tensor> out = allocator.ok()
                                   ? Tensor::Allocate(*std::move(allocator), src.dtype(), src.shape())
                                   : allocator.status();
  absl::StatusOr<Tensor> source = src;
  if (out.ok() && src.location().kind == MemoryKind::kHost) source = StageInPinnedMemory(src);
  if (!out.ok() || !source.ok()) {
    std::move(done)(out.ok() ? source.status() : out.status());
    return;
  }
  if (src.TotalBytes() == 0) {
    std::move(done)(*std::move(out));
    return;
  }
  const Tensor from = *std::move(source);
  Tensor to = *std::move(out);
  cuda::CopyAsync(from.data(), from.location(), to.data(), to.location(), src.TotalBytes(),
                  [from, to, done = std::move(done)](absl::Status status) mutable {
                    if (status.ok()) {
                      std::move(done)(std::move(to));
                    } else {
                      std::move(done)(std::move(status));
                    }
                  });
}

absl::StatusOr<Tensor> CopyTensor(const Tensor& src, MemoryLocation dst) {
  Notification copied;
  absl::StatusOr<Tensor> result;
  CopyTensorAsync(src, dst, [&](absl::StatusOr<Tensor> copy) {
    result = std::move(copy);
    copied.Notify();
  });
  copied.WaitForNotification();
  return result;
}

}  // namespace rdv
