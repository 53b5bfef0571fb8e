// Copies a tensor into another memory location, by DMA where a GPU is
// involved. Host to host never copies (see IntraProcessRendezvous).
#pragma once

#include "absl/functional/any_invocable.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace rdv {

using CopyTensorDone = absl::AnyInvocable<void(absl::StatusOr<Tensor>) &&>;

// A new tensor in `dst` holding `src`'s bytes; `done` runs when the copy is
// complete (on a CUDA completion thread, or at once on error). Host
// destinations get pinned memory; a pageable host source is staged through
// pinned memory in chunks (core/chunked_copy.h). INVALID_ARGUMENT for a
// dtype that cannot be DMA-copied (strings); FAILED_PRECONDITION without
// CUDA or a GPU.
void CopyTensorAsync(const Tensor& src, MemoryLocation dst, CopyTensorDone done);

// The same into memory from `dst` (device or pinned host memory: a data
// plane's pool, say); `src` is device or pinned host memory.
void CopyTensorAsync(const Tensor& src, std::shared_ptr<Allocator> dst, CopyTensorDone done);

// CopyTensorAsync that blocks until the copy is done.
absl::StatusOr<Tensor> CopyTensor(const Tensor& src, MemoryLocation dst);

}  // namespace rdv
