// CUDA IPC as a fast path beside every protocol: when a consumer that wants
// a tensor on its GPU runs on the producer's host, and the producer's
// tensor is in GPU memory, the producer lends the allocation instead of
// sending bytes, and the consumer copies device to device. RDV_CUDA_IPC=0
// turns it off on either side; the tensor then travels by the protocol,
// staged through host memory.
#pragma once

#include "absl/functional/any_invocable.h"
#include "control/held_transfers.h"
#include "rdv/control/worker.pb.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace rdv::control {

// Consumer: asks for CUDA IPC in `request` when `destination` is a GPU and
// this process may map GPU memory.
void RequestCudaIpc(MemoryLocation destination, RecvTensorRequest* request);

// Producer: whether `value` may be lent to the consumer of `request`.
bool CudaIpcWanted(const RecvTensorRequest& request, const Tensor& value);

// Producer: exports `value`'s allocation and holds `value` in `lent` until
// the consumer releases it (or is lost: `consumer`). Errors say why the
// allocation cannot be lent.
absl::StatusOr<CudaIpcDescriptor> LendByCudaIpc(int64_t step_id, const Tensor& value,
                                                const ConsumerWatcher& consumer,
                                                HeldTransfers* lent);

// Consumer: copies the lent bytes into `destination` (a device tensor of
// the descriptor's length); `done` runs on a CUDA completion thread, or at
// once when the handle cannot be opened.
void FetchByCudaIpc(const CudaIpcDescriptor& descriptor, Tensor destination,
                    absl::AnyInvocable<void(absl::Status) &&> done);

}  // namespace rdv::control
