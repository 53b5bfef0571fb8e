#include "control/named_tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdv::control {

absl::Status ToNamedTensor(const std::string& name, const Tensor& tensor, NamedTensor* out) {
  if (!DTypeIsMemcpyable(tensor.dtype()) || !tensor.location().is_host()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is ", tensor.DebugString(),
                                                   "; only numeric host tensors travel here"));
  }
  out->set_name(name);
  out->set_dtype(static_cast<int>(tensor.dtype()));
  for (int64_t dim : tensor.shape().dims()) out->add_dims(dim);
  out->set_content(static_cast<const char*>(tensor.data()), tensor.TotalBytes());
  return absl::OkStatus();
}

absl::StatusOr<Tensor> FromNamedTensor(const NamedTensor& named) {
  auto fail = [&named](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", named.name(), "': ", why));
  };
  absl::StatusOr<DType> dtype = DTypeFromEnumValue(named.dtype());
  if (!dtype.ok() || !DTypeIsMemcpyable(*dtype)) return fail("not a numeric dtype");
  absl::StatusOr<TensorShape> shape =
      TensorShape::Create(absl::MakeConstSpan(named.dims().data(), named.dims().size()));
  if (!shape.ok()) return fail(shape.status().message());
  RDV_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(HostAllocator(), *dtype, *shape));
  if (tensor.TotalBytes() != named.content().size()) {
    return fail(absl::StrCat(named.content().size(), " bytes for ", tensor.DebugString()));
  }
  if (!named.content().empty()) {
    std::memcpy(tensor.data(), named.content().data(), named.content().size());
  }
  return tensor;
}

}  // namespace rdv::control
