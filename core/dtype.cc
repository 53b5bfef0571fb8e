#include "core/dtype.h"

#include <array>
#include <complex>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace rdv {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 16> kDTypes = {{
    {DType::kFloat, "float", sizeof(float)},
    {DType::kDouble, "double", sizeof(double)},
    {DType::kInt32, "int32", sizeof(int32_t)},
    {DType::kUInt8, "uint8", sizeof(uint8_t)},
    {DType::kInt16, "int16", sizeof(int16_t)},
    {DType::kInt8, "int8", sizeof(int8_t)},
    {DType::kString, "string", sizeof(std::string)},
    {DType::kComplex64, "complex64", sizeof(std::complex<float>)},
    {DType::kInt64, "int64", sizeof(int64_t)},
    {DType::kBool, "bool", sizeof(bool)},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kUInt16, "uint16", sizeof(uint16_t)},
    {DType::kComplex128, "complex128", sizeof(std::complex<double>)},
    {DType::kHalf, "half", 2},
    {DType::kUInt32, "uint32", sizeof(uint32_t)},
    {DType::kUInt64, "uint64", sizeof(uint64_t)},
}};

const DTypeInfo* Find(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info == nullptr ? 0 : info->size;
}

bool DTypeIsMemcpyable(DType dtype) {
  return dtype != DType::kString && Find(dtype) != nullptr;
}

absl::string_view DTypeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info == nullptr ? "invalid" : info->name;
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  if (name == "float16") return DType::kHalf;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name,
      "'; expected one of float, double, half, bfloat16, int8, int16, int32, int64, "
      "uint8, uint16, uint32, uint64, bool, complex64, complex128, string"));
}

absl::StatusOr<DType> DTypeFromEnumValue(int value) {
  const auto dtype = static_cast<DType>(value);
  if (Find(dtype) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype enum value ", value, " is not a dtype rdv supports"));
  }
  return dtype;
}

}  // namespace rdv
