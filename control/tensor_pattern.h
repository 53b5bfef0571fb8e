// A deterministic fill for tensors, so that a consumer in another process
// can check every byte it received without a second copy of the data.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace rdv::control {

// A host tensor of `dtype` and `shape` filled with the pattern of `seed`,
// from `allocator` (strings always from the host allocator).
absl::StatusOr<Tensor> MakePatternTensor(DType dtype, const TensorShape& shape, uint32_t seed,
                                         std::shared_ptr<Allocator> allocator = HostAllocator());

// OK when `tensor` (in host memory) holds the pattern of `seed`; else
// DATA_LOSS naming the first byte or element that differs.
absl::Status VerifyPattern(const Tensor& tensor, uint32_t seed);
// As VerifyPattern, over at most `blocks` 256-byte blocks spread evenly from
// the first to the last (strings: every element): a check that costs
// microseconds at any size, for a loop that must not pause.
absl::Status VerifyPatternSample(const Tensor& tensor, uint32_t seed, size_t blocks);

}  // namespace rdv::control
