// The CUDA settings rdv reads from the environment (docs/gpu.md). Workers
// check them at start, so that a value that does not parse stops the worker
// with a message naming the variable instead of running with another value.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace rdv::cuda {

// RDV_CUDA_IPC: 1 (default) or 0.
absl::StatusOr<bool> IpcSetting();

// RDV_CUDA_CACHE_BYTES: free memory each CUDA allocator keeps (default 1 GiB).
absl::StatusOr<size_t> CacheBytesSetting();

// Both of the above; INVALID_ARGUMENT for the first that does not parse.
absl::Status CheckSettings();

}  // namespace rdv::cuda
