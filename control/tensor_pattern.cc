#include "control/tensor_pattern.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace rdv::control {
namespace {

// Byte i of the pattern is uint8(i + 131 seed + 7 (i >> 8) + 13 (i >> 16)).
// Within a 256-byte block only the low byte of i changes, so each block is
// the ramp 0..255 rotated by the block's base: filled and checked with
// memcpy/memcmp against kRamp, at memory speed.
constexpr size_t kBlock = 256;

struct Ramp {
  uint8_t bytes[2 * kBlock];
  Ramp() {
    for (size_t i = 0; i < 2 * kBlock; ++i) bytes[i] = static_cast<uint8_t>(i);
  }
};
const Ramp kRamp;

const uint8_t* BlockPattern(uint64_t block, uint32_t seed) {
  const uint64_t i = block * kBlock;
  return kRamp.bytes + static_cast<uint8_t>(seed * 131u + (i >> 8) * 7u + (i >> 16) * 13u);
}

std::string PatternString(int64_t j, uint32_t seed) {
  return std::string(static_cast<size_t>((j + seed) % 23),
                     static_cast<char>('a' + (j * 7 + seed) % 26));
}

}  // namespace

absl::StatusOr<Tensor> MakePatternTensor(DType dtype, const TensorShape& shape, uint32_t seed,
                                         std::shared_ptr<Allocator> allocator) {
  if (dtype == DType::kString) allocator = HostAllocator();
  RDV_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(std::move(allocator), dtype, shape));
  if (dtype == DType::kString) {
    for (int64_t j = 0; j < tensor.num_elements(); ++j) {
      tensor.flat<std::string>()[j] = PatternString(j, seed);
    }
    return tensor;
  }
  auto* bytes = tensor.flat<uint8_t>();
  for (size_t offset = 0; offset < tensor.TotalBytes(); offset += kBlock) {
    std::memcpy(bytes + offset, BlockPattern(offset / kBlock, seed),
                std::min(kBlock, tensor.TotalBytes() - offset));
  }
  return tensor;
}

namespace {

absl::Status VerifyStrings(const Tensor& tensor, uint32_t seed) {
  for (int64_t j = 0; j < tensor.num_elements(); ++j) {
    if (tensor.flat<std::string>()[j] != PatternString(j, seed)) {
      return absl::DataLossError(absl::StrCat("string element ", j, " differs"));
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyBlock(const Tensor& tensor, uint64_t block, uint32_t seed) {
  const size_t offset = block * kBlock;
  const size_t length = std::min(kBlock, tensor.TotalBytes() - offset);
  const auto* bytes = tensor.flat<uint8_t>() + offset;
  const uint8_t* want = BlockPattern(block, seed);
  if (std::memcmp(bytes, want, length) == 0) return absl::OkStatus();
  size_t i = 0;
  while (bytes[i] == want[i]) ++i;
  return absl::DataLossError(absl::StrCat("byte ", offset + i, " of ", tensor.TotalBytes(),
                                          " differs: got ", bytes[i], ", want ", want[i]));
}

absl::Status VerifyBlocks(const Tensor& tensor, uint32_t seed, size_t most) {
  if (!tensor.location().is_host()) {
    return absl::InvalidArgumentError("VerifyPattern needs a host tensor");
  }
  if (tensor.dtype() == DType::kString) return VerifyStrings(tensor, seed);
  const uint64_t blocks = (tensor.TotalBytes() + kBlock - 1) / kBlock;
  if (blocks <= most) {
    for (uint64_t block = 0; block < blocks; ++block) {
      RDV_RETURN_IF_ERROR(VerifyBlock(tensor, block, seed));
    }
    return absl::OkStatus();
  }
  // The first block, the last, and the rest evenly between them.
  const uint64_t gaps = std::max<uint64_t>(most - 1, 1);
  for (uint64_t i = 0; i < most; ++i) {
    RDV_RETURN_IF_ERROR(VerifyBlock(tensor, i * (blocks - 1) / gaps, seed));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyPattern(const Tensor& tensor, uint32_t seed) {
  return VerifyBlocks(tensor, seed, std::numeric_limits<size_t>::max());
}

absl::Status VerifyPatternSample(const Tensor& tensor, uint32_t seed, size_t blocks) {
  return VerifyBlocks(tensor, seed, std::max<size_t>(blocks, 1));
}

}  // namespace rdv::control
