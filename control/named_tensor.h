// Host tensors of numeric dtypes in RunGraph's feeds and fetches
// (worker.proto's NamedTensor): small values a client hands in or reads
// back, copied into the message, unlike RecvTensor's payloads.
#pragma once

#include <string>

#include "rdv/control/worker.pb.h"
#include "core/tensor.h"

namespace rdv::control {

// INVALID_ARGUMENT for a string or GPU tensor.
absl::Status ToNamedTensor(const std::string& name, const Tensor& tensor, NamedTensor* out);

// INVALID_ARGUMENT naming the tensor when its dtype, dims or byte count
// do not fit.
absl::StatusOr<Tensor> FromNamedTensor(const NamedTensor& named);

}  // namespace rdv::control
