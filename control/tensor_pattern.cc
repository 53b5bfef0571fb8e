#include "control/tensor_pattern.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rdv::control {
namespace {

uint8_t PatternByte(uint64_t i, uint32_t seed) {
  return static_cast<uint8_t>(i + seed * 131u + (i >> 8) * 7u + (i >> 16) * 13u);
}

std::string PatternString(int64_t j, uint32_t seed) {
  return std::string(static_cast<size_t>((j + seed) % 23),
                     static_cast<char>('a' + (j * 7 + seed) % 26));
}

}  // namespace

absl::StatusOr<Tensor> MakePatternTensor(DType dtype, const TensorShape& shape, uint32_t seed) {
  RDV_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(HostAllocator(), dtype, shape));
  if (dtype == DType::kString) {
    for (int64_t j = 0; j < tensor.num_elements(); ++j) {
      tensor.flat<std::string>()[j] = PatternString(j, seed);
    }
    return tensor;
  }
  auto* bytes = tensor.flat<uint8_t>();
  for (size_t i = 0; i < tensor.TotalBytes(); ++i) bytes[i] = PatternByte(i, seed);
  return tensor;
}

absl::Status VerifyPattern(const Tensor& tensor, uint32_t seed) {
  if (!tensor.location().is_host()) {
    return absl::InvalidArgumentError("VerifyPattern needs a host tensor");
  }
  if (tensor.dtype() == DType::kString) {
    for (int64_t j = 0; j < tensor.num_elements(); ++j) {
      if (tensor.flat<std::string>()[j] != PatternString(j, seed)) {
        return absl::DataLossError(absl::StrCat("string element ", j, " differs"));
      }
    }
    return absl::OkStatus();
  }
  const auto* bytes = tensor.flat<uint8_t>();
  for (size_t i = 0; i < tensor.TotalBytes(); ++i) {
    if (bytes[i] != PatternByte(i, seed)) {
      return absl::DataLossError(absl::StrCat("byte ", i, " of ", tensor.TotalBytes(),
                                              " differs: got ", bytes[i], ", want ",
                                              PatternByte(i, seed)));
    }
  }
  return absl::OkStatus();
}

}  // namespace rdv::control
