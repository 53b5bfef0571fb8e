// CUDA memory and DMA copies. The API exists in every build; when rdv is
// built without CUDA, or runs where no GPU or driver is present, the
// functions say so with FAILED_PRECONDITION instead of failing later.
// The functions that touch a device make it the calling thread's current
// device (cudaSetDevice) and leave it so: code that relies on a current
// device sets its own after calling them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "core/allocator.h"
#include "core/memory.h"
#include "core/status.h"

namespace rdv::cuda {

// True when this build has CUDA support (RDV_WITH_CUDA found the toolkit).
bool CompiledIn();

// Usable CUDA devices: 0 without CUDA support, driver or GPU. Probed once.
int DeviceCount();

// Why DeviceCount() is 0 ("built without CUDA", "no CUDA driver: ..."); empty
// when there are devices.
std::string UnavailableReason();

// Page-locked host memory, usable by every device's DMA engines.
absl::StatusOr<std::shared_ptr<Allocator>> PinnedHostAllocator();

// Page-locks host memory allocated elsewhere (a transport's pool), so that
// DMA engines read and write it directly. UnpinHostMemory before it goes.
absl::Status PinHostMemory(void* address, size_t bytes);
void UnpinHostMemory(void* address);

// Memory of device `device` (0 <= device < DeviceCount()).
absl::StatusOr<std::shared_ptr<Allocator>> DeviceAllocator(int device);

// The cudaMalloc allocation that holds a device pointer. The buffer id is
// unique in the process (CU_POINTER_ATTRIBUTE_BUFFER_ID): an address freed
// and allocated again gets a new one, so caches keyed by it never see a
// stale allocation.
struct DeviceAllocation {
  uintptr_t base = 0;
  size_t size = 0;
  uint64_t buffer_id = 0;
};

// INVALID_ARGUMENT for a pointer outside CUDA device memory;
// FAILED_PRECONDITION without CUDA or a GPU. Any thread may call it, one
// that never used CUDA too (it makes the pointer's device current).
absl::StatusOr<DeviceAllocation> AllocationOf(const void* device_pointer);

using CopyDone = absl::AnyInvocable<void(absl::Status) &&>;

// Copies `bytes` by DMA on a stream dedicated to the direction (host to
// device, device to host, device to device) of the device involved. At
// least one side is device memory; a host side must be pinned. Returns at
// once; `done` runs on that stream's completion thread when the copy has
// finished, with the CUDA error if it failed. Both sides must stay valid
// until then.
void CopyAsync(const void* src, MemoryLocation src_location, void* dst,
               MemoryLocation dst_location, size_t bytes, CopyDone done);

}  // namespace rdv::cuda
