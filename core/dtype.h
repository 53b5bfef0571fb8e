// Element types of a tensor. The numeric values are TensorFlow's DataType
// enum values, so that they can travel in TensorFlow-compatible protos.
#pragma once

#include <cstddef>
#include "absl/strings/string_view.h"

#include "core/status.h"

namespace rdv {

enum class DType : int {
  kInvalid = 0,
  kFloat = 1,
  kDouble = 2,
  kInt32 = 3,
  kUInt8 = 4,
  kInt16 = 5,
  kInt8 = 6,
  kString = 7,
  kComplex64 = 8,
  kInt64 = 9,
  kBool = 10,
  kBFloat16 = 14,
  kUInt16 = 17,
  kComplex128 = 18,
  kHalf = 19,
  kUInt32 = 22,
  kUInt64 = 23,
};

// Bytes per element; for kString the size of the host object (std::string).
// 0 for kInvalid.
size_t DTypeSize(DType dtype);

// True when a tensor of this type can be copied byte for byte, to another
// host buffer, a GPU or a peer. Strings cannot: they hold pointers.
bool DTypeIsMemcpyable(DType dtype);

// TensorFlow's spelling: "float", "int32", "bfloat16", "half", ...
absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

// Validates a numeric value that arrived from outside (a proto, a file).
absl::StatusOr<DType> DTypeFromEnumValue(int value);

}  // namespace rdv
