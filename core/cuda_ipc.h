// CUDA IPC between two processes of one host: the producer exports the
// allocation that holds a device tensor, the consumer maps it and copies
// the bytes out by DMA, device to device. No host memory and no wire.
//
// The producer must keep its tensor alive until the consumer says it has
// copied (ReleaseTransfers). A mapping stays open in the consumer for
// reuse: CUDA lets a process open one allocation only once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "core/status.h"

namespace rdv::cuda {

// Whether this process may use CUDA IPC: RDV_CUDA_IPC (1, the default, or 0)
// and a usable GPU. Read once.
bool IpcEnabled();

// Identifies this host's running kernel (its boot id), so that two
// processes can tell they share GPUs. Empty when it cannot be read.
const std::string& HostId();

// What a consumer needs to map a device tensor of this process.
struct IpcExport {
  std::string handle;      // the bytes of a cudaIpcMemHandle_t
  uint64_t offset = 0;     // of the tensor inside its allocation
  uint64_t buffer_id = 0;  // the allocation's process-wide unique id
};

// FAILED_PRECONDITION without CUDA or a GPU; INVALID_ARGUMENT for memory
// that cannot be exported (not device memory from cudaMalloc).
absl::StatusOr<IpcExport> ExportIpc(const void* device_pointer);

// A producer's allocation mapped into this process, usable from `device`.
// Mappings are cached by (handle, buffer id); the least recently used are
// closed beyond a bound once no copy holds them. The returned pointer is
// the allocation's base; it stays valid while the shared_ptr lives.
absl::StatusOr<std::shared_ptr<void>> OpenIpc(absl::string_view handle, uint64_t buffer_id,
                                              int device);

}  // namespace rdv::cuda
