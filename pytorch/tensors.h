// at::Tensor <-> rdv::Tensor for the torch backend. A sent tensor's storage
// becomes the rdv tensor's buffer (no copy), or is copied into memory its
// receiver reads itself (a staged send); a received value is copied once
// into the caller's tensor, after checking that it fits exactly.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "core/buffer.h"
#include "core/split_copy.h"
#include "core/status.h"
#include "core/tensor.h"

namespace rdv::control {
class WorkerServer;
}  // namespace rdv::control

namespace rdv::pytorch {

absl::StatusOr<DType> DTypeOf(at::ScalarType type);

// "float32 [2, 3] (24 bytes)": how errors name a tensor on either side.
std::string Describe(const at::Tensor& tensor);
std::string Describe(const Tensor& tensor);

// The CPU tensor's bytes as an rdv tensor. `tensor` must be contiguous; it
// stays referenced until rdv lets go of the buffer, then `released` runs
// (on whichever thread dropped the last reference).
absl::StatusOr<Tensor> WrapForSend(const at::Tensor& tensor,
                                   absl::AnyInvocable<void() &&> released);

// The rdv shape of `tensor`.
absl::StatusOr<TensorShape> ShapeOf(const at::Tensor& tensor);

// A staged send's copy of `tensor` (contiguous or not): from
// kStageFromBytes up, where `server`'s data plane has memory the receiver
// copies out itself for it (WorkerServer::AllocatePeerReadable), a copy
// there, made by `copier` (two threads; torch's copy for a strided
// tensor; docs/torch.md). nullopt where the send is not staged: it goes
// from the tensor's own bytes (WrapForSend). Blocks for the copy.
absl::StatusOr<std::optional<Tensor>> StageForSend(const at::Tensor& tensor,
                                                   control::WorkerServer& server,
                                                   SplitCopier& copier);

// `staging`'s bytes, held until rdv lets go of them; then `released` runs
// (on whichever thread dropped the last reference).
absl::StatusOr<Tensor> HoldUntilReleased(Tensor staging, absl::AnyInvocable<void() &&> released);

// Staging costs the sender a copy; from here up it pays: the two copies
// (CopyLarge's, from 4 MiB up by two threads each) cost less than UCX's
// rendezvous reading the sender's tensor by one thread's cma, and a staged
// send completes without waiting for the receiver (docs/torch.md).
inline constexpr size_t kStageFromBytes = size_t{1} << 20;

// `destination`'s storage as the landing buffer of a Recv
// (RendezvousArgs::landing), when it is contiguous; null otherwise.
std::shared_ptr<Buffer> LandingOf(const at::Tensor& destination);

// Copies `value` into `destination` when dtype and byte count agree (no
// copy when the bytes landed there already); INVALID_ARGUMENT naming both
// sides otherwise.
absl::Status CopyReceived(const Tensor& value, at::Tensor& destination);

}  // namespace rdv::pytorch
