// DMA copies in chunks that overlap the work on the other side of the
// staging buffer: the wire (RecvTensor's stream) or a memcpy from pageable
// memory. Staging buffers are pinned host tensors from the caching pinned
// allocator, so a warm hot path allocates nothing.
//
// Completions run on CUDA's completion threads; both classes keep their
// state alive until the last copy ends, so an owner may drop them early
// (a call that failed) without waiting.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "core/device_copy.h"
#include "core/tensor.h"

namespace rdv {

// The chunk of a staged copy: large enough to run a DMA engine at full
// speed, small enough that the first chunk leaves early.
inline constexpr size_t kStagingChunkBytes = size_t{4} << 20;

// Pinned host to device, as the host tensor fills up in order: each whole
// chunk starts its copy at once, so chunk k copies while chunk k+1 arrives.
class ChunkedUpload {
 public:
  // `host` must be pinned host memory of a DMA-safe dtype; a new tensor of
  // its dtype and shape on `device` receives it.
  static absl::StatusOr<std::unique_ptr<ChunkedUpload>> Create(Tensor host, MemoryLocation device,
                                                               size_t chunk_bytes);
  ~ChunkedUpload();

  // The first `filled` bytes of the host tensor are final.
  void Advance(size_t filled);
  // Copies what is left and calls `done` once every copy has ended, with
  // the device tensor or the first error. Call once, after the last Advance.
  void Finish(CopyTensorDone done);

 private:
  struct State;
  explicit ChunkedUpload(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void CopyUpTo(size_t end);
  std::shared_ptr<State> state_;
};

// Device to pinned host: every chunk's copy is queued at once, and bytes
// may leave from the host tensor as soon as their chunk has landed.
class ChunkedDownload {
 public:
  static absl::StatusOr<std::unique_ptr<ChunkedDownload>> Start(const Tensor& device,
                                                                size_t chunk_bytes);
  ~ChunkedDownload();

  // Pinned host tensor of the device tensor's dtype and shape.
  const Tensor& host() const;

  // True when the first `bytes` have landed; false when not yet, and then
  // `ready` runs (once, on a CUDA completion thread) when they have or a
  // copy failed; the copy's error, if one failed.
  absl::StatusOr<bool> WhenReady(size_t bytes, absl::AnyInvocable<void() &&> ready);

 private:
  struct State;
  explicit ChunkedDownload(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace rdv
