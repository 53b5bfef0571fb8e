// at::Tensor <-> rdv::Tensor for the torch backend. A sent tensor's storage
// becomes the rdv tensor's buffer (no copy), or is copied into memory its
// receiver reads itself (a staged send); a received value is copied once
// into the caller's tensor, after checking that it fits exactly.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "core/buffer.h"
#include "core/split_copy.h"
#include "core/status.h"
#include "core/tensor.h"

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

// Copies `tensor` (contiguous or not) into `staging`, an rdv tensor of the
// same dtype and byte count: a contiguous one by `copier` (two threads
// from SplitCopier::kMinSplitBytes up), a strided one by torch.
void CopyForSend(const at::Tensor& tensor, Tensor& staging, SplitCopier& copier);

// `staging`'s bytes as the value to send: `staging` stays referenced until
// rdv lets go of them, then `released` runs (on whichever thread dropped
// the last reference).
absl::StatusOr<Tensor> HoldUntilReleased(Tensor staging, absl::AnyInvocable<void() &&> released);

// `destination`'s storage as the landing buffer of a Recv
// (RendezvousArgs::landing), when it is contiguous; null otherwise.
std::shared_ptr<Buffer> LandingOf(const at::Tensor& destination);

// Copies `value` into `destination` when dtype and byte count agree (no
// copy when the bytes landed there already); INVALID_ARGUMENT naming both
// sides otherwise.
absl::Status CopyReceived(const Tensor& value, at::Tensor& destination);

}  // namespace rdv::pytorch
