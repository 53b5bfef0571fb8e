#include "core/device_copy.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/chunked_copy.h"
#include "core/cuda.h"
#include "core/notification.h"

namespace rdv {
namespace {

absl::StatusOr<std::shared_ptr<Allocator>> AllocatorFor(MemoryLocation location) {
  if (location.kind == MemoryKind::kCudaDevice) return cuda::DeviceAllocator(location.device);
  return cuda::PinnedHostAllocator();
}

absl::Status CheckDmaSafe(const Tensor& src, MemoryLocation dst) {
  if (DTypeIsMemcpyable(src.dtype())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Non-DMA-safe ", DTypeName(src.dtype()),
                                                 " tensor may not be copied from ",
                                                 src.location().ToString(), " to ",
                                                 dst.ToString()));
}

// A pageable host tensor goes to the device through pinned staging memory,
// chunk by chunk: the memcpy of a chunk overlaps the DMA of the one before.
void UploadPageable(const Tensor& src, MemoryLocation dst, CopyTensorDone done) {
  absl::StatusOr<std::shared_ptr<Allocator>> pinned = cuda::PinnedHostAllocator();
  absl::StatusOr<Tensor> staging =
      pinned.ok() ? Tensor::Allocate(*std::move(pinned), src.dtype(), src.shape()) : pinned.status();
  absl::StatusOr<std::unique_ptr<ChunkedUpload>> upload =
      staging.ok() ? ChunkedUpload::Create(*staging, dst, kStagingChunkBytes) : staging.status();
  if (!upload.ok()) {
    std::move(done)(upload.status());
    return;
  }
  const size_t total = src.TotalBytes();
  for (size_t offset = 0; offset < total; offset += kStagingChunkBytes) {
    const size_t length = std::min(kStagingChunkBytes, total - offset);
    std::memcpy(static_cast<char*>(staging->data()) + offset,
                static_cast<const char*>(src.data()) + offset, length);
    (*upload)->Advance(offset + length);
  }
  (*upload)->Finish(std::move(done));
}

}  // namespace

void CopyTensorAsync(const Tensor& src, MemoryLocation dst, CopyTensorDone done) {
  if (const absl::Status safe = CheckDmaSafe(src, dst); !safe.ok()) {
    std::move(done)(safe);
    return;
  }
  if (src.location().kind == MemoryKind::kHost && !dst.is_host() && src.TotalBytes() > 0) {
    UploadPageable(src, dst, std::move(done));
    return;
  }
  absl::StatusOr<std::shared_ptr<Allocator>> allocator = AllocatorFor(dst);
  if (!allocator.ok()) {
    std::move(done)(allocator.status());
    return;
  }
  CopyTensorAsync(src, *std::move(allocator), std::move(done));
}

void CopyTensorAsync(const Tensor& src, std::shared_ptr<Allocator> dst, CopyTensorDone done) {
  if (const absl::Status safe = CheckDmaSafe(src, dst->Location()); !safe.ok()) {
    std::move(done)(safe);
    return;
  }
  absl::StatusOr<Tensor> out = Tensor::Allocate(std::move(dst), src.dtype(), src.shape());
  if (!out.ok() || src.TotalBytes() == 0) {
    std::move(done)(std::move(out));
    return;
  }
  const Tensor from = src;
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
