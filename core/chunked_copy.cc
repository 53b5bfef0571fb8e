#include "core/chunked_copy.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/cuda.h"

namespace rdv {
namespace {

absl::StatusOr<Tensor> Allocate(const Tensor& like, MemoryLocation where) {
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> allocator,
                       where.is_host() ? cuda::PinnedHostAllocator()
                                       : cuda::DeviceAllocator(where.device));
  return Tensor::Allocate(std::move(allocator), like.dtype(), like.shape());
}

}  // namespace

struct ChunkedUpload::State {
  Tensor host;
  Tensor device;
  size_t chunk_bytes = 0;
  std::mutex mu;
  size_t issued = 0;       // bytes whose copy started; mu
  int in_flight = 0;       // mu
  absl::Status status;     // the first error; mu
  CopyTensorDone done;     // set by Finish; mu
  bool finishing = false;  // mu
};

absl::StatusOr<std::unique_ptr<ChunkedUpload>> ChunkedUpload::Create(Tensor host,
                                                                     MemoryLocation device,
                                                                     size_t chunk_bytes) {
  if (host.location().kind != MemoryKind::kPinnedHost || !DTypeIsMemcpyable(host.dtype())) {
    return absl::InvalidArgumentError("ChunkedUpload needs a pinned host tensor of a DMA-safe dtype");
  }
  auto state = std::make_shared<State>();
  RDV_ASSIGN_OR_RETURN(state->device, Allocate(host, device));
  state->host = std::move(host);
  state->chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  return std::unique_ptr<ChunkedUpload>(new ChunkedUpload(std::move(state)));
}

ChunkedUpload::~ChunkedUpload() = default;

void ChunkedUpload::Advance(size_t filled) {
  const size_t whole_chunks = filled / state_->chunk_bytes * state_->chunk_bytes;
  CopyUpTo(filled == state_->host.TotalBytes() ? filled : whole_chunks);
}

void ChunkedUpload::CopyUpTo(size_t end) {
  size_t begin = 0;
  {
    std::lock_guard lock(state_->mu);
    if (end <= state_->issued || !state_->status.ok()) return;
    begin = state_->issued;
    state_->issued = end;
    ++state_->in_flight;
  }
  const auto* src = static_cast<const char*>(state_->host.data()) + begin;
  auto* dst = static_cast<char*>(state_->device.data()) + begin;
  cuda::CopyAsync(src, state_->host.location(), dst, state_->device.location(), end - begin,
                  [state = state_](absl::Status status) {
                    CopyTensorDone done;
                    {
                      std::lock_guard lock(state->mu);
                      state->status.Update(status);
                      if (--state->in_flight > 0 || !state->finishing) return;
                      done = std::move(state->done);
                    }
                    if (state->status.ok()) {
                      std::move(done)(state->device);
                    } else {
                      std::move(done)(state->status);
                    }
                  });
}

void ChunkedUpload::Finish(CopyTensorDone done) {
  CopyUpTo(state_->host.TotalBytes());
  absl::Status status;
  {
    std::lock_guard lock(state_->mu);
    state_->finishing = true;
    if (state_->in_flight > 0) {
      state_->done = std::move(done);
      return;
    }
    status = state_->status;
  }
  if (status.ok()) {
    std::move(done)(state_->device);
  } else {
    std::move(done)(status);
  }
}

struct ChunkedDownload::State {
  Tensor device;
  Tensor host;
  std::mutex mu;
  size_t landed = 0;     // leading bytes on the host; mu
  absl::Status status;   // the first error; mu
  size_t wanted = 0;     // what `ready` waits for; mu
  absl::AnyInvocable<void() &&> ready;  // mu
};

absl::StatusOr<std::unique_ptr<ChunkedDownload>> ChunkedDownload::Start(const Tensor& device,
                                                                        size_t chunk_bytes) {
  if (device.location().kind != MemoryKind::kCudaDevice || !DTypeIsMemcpyable(device.dtype())) {
    return absl::InvalidArgumentError(
        "ChunkedDownload needs a device tensor of a DMA-safe dtype");
  }
  auto state = std::make_shared<State>();
  state->device = device;
  RDV_ASSIGN_OR_RETURN(state->host, Allocate(device, MemoryLocation::PinnedHost()));
  const size_t total = device.TotalBytes();
  const size_t chunk = std::max<size_t>(chunk_bytes, 1);
  // One stream per direction: the chunks land in order.
  for (size_t begin = 0; begin < total; begin += chunk) {
    const size_t end = std::min(total, begin + chunk);
    cuda::CopyAsync(static_cast<const char*>(device.data()) + begin, device.location(),
                    static_cast<char*>(state->host.data()) + begin, state->host.location(),
                    end - begin, [state, end](absl::Status status) {
                      absl::AnyInvocable<void() &&> ready;
                      {
                        std::lock_guard lock(state->mu);
                        state->status.Update(status);
                        if (status.ok()) state->landed = end;
                        if (state->ready == nullptr ||
                            (state->landed < state->wanted && state->status.ok())) {
                          return;
                        }
                        ready = std::move(state->ready);
                        state->ready = nullptr;
                      }
                      std::move(ready)();
                    });
  }
  return std::unique_ptr<ChunkedDownload>(new ChunkedDownload(std::move(state)));
}

ChunkedDownload::~ChunkedDownload() = default;

const Tensor& ChunkedDownload::host() const { return state_->host; }

absl::StatusOr<bool> ChunkedDownload::WhenReady(size_t bytes,
                                                absl::AnyInvocable<void() &&> ready) {
  std::lock_guard lock(state_->mu);
  RDV_RETURN_IF_ERROR(state_->status);
  if (state_->landed >= bytes) return true;
  state_->wanted = bytes;
  state_->ready = std::move(ready);
  return false;
}

}  // namespace rdv
