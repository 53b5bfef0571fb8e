#include "python/dlpack.h"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda.h"

namespace py = pybind11;

namespace rdv::python {
namespace {

constexpr char kCapsuleName[] = "dltensor";
constexpr char kUsedCapsuleName[] = "used_dltensor";

absl::StatusOr<DType> DTypeOf(DLDataType type) {
  const auto unknown = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("a DLPack tensor of type code ", type.code, ", ", type.bits, " bits, ",
                     type.lanes, " lanes has no rdv dtype"));
  };
  if (type.lanes != 1) return unknown();
  switch (type.code) {
    case kDLFloat:
      if (type.bits == 16) return DType::kHalf;
      if (type.bits == 32) return DType::kFloat;
      if (type.bits == 64) return DType::kDouble;
      break;
    case kDLBfloat:
      if (type.bits == 16) return DType::kBFloat16;
      break;
    case kDLInt:
      if (type.bits == 8) return DType::kInt8;
      if (type.bits == 16) return DType::kInt16;
      if (type.bits == 32) return DType::kInt32;
      if (type.bits == 64) return DType::kInt64;
      break;
    case kDLUInt:
      if (type.bits == 8) return DType::kUInt8;
      if (type.bits == 16) return DType::kUInt16;
      if (type.bits == 32) return DType::kUInt32;
      if (type.bits == 64) return DType::kUInt64;
      break;
    case kDLComplex:
      if (type.bits == 64) return DType::kComplex64;
      if (type.bits == 128) return DType::kComplex128;
      break;
  }
  return unknown();
}

absl::StatusOr<DLDataType> DLPackTypeOf(DType dtype) {
  const auto type = [](uint8_t code, uint8_t bits) { return DLDataType{code, bits, 1}; };
  switch (dtype) {
    case DType::kHalf: return type(kDLFloat, 16);
    case DType::kFloat: return type(kDLFloat, 32);
    case DType::kDouble: return type(kDLFloat, 64);
    case DType::kBFloat16: return type(kDLBfloat, 16);
    case DType::kInt8: return type(kDLInt, 8);
    case DType::kInt16: return type(kDLInt, 16);
    case DType::kInt32: return type(kDLInt, 32);
    case DType::kInt64: return type(kDLInt, 64);
    case DType::kUInt8: return type(kDLUInt, 8);
    case DType::kUInt16: return type(kDLUInt, 16);
    case DType::kUInt32: return type(kDLUInt, 32);
    case DType::kUInt64: return type(kDLUInt, 64);
    case DType::kComplex64: return type(kDLComplex, 64);
    case DType::kComplex128: return type(kDLComplex, 128);
    default:
      // DLPack 0.6 has no bool, and strings are not bytes.
      return absl::UnimplementedError(
          absl::StrCat("a ", DTypeName(dtype), " tensor cannot cross through DLPack"));
  }
}

absl::StatusOr<MemoryLocation> LocationOf(DLDevice device) {
  switch (device.device_type) {
    case kDLCPU: return MemoryLocation::Host();
    case kDLCUDAHost: return MemoryLocation::PinnedHost();
    case kDLCUDA:
      if (!cuda::CompiledIn()) {
        return absl::FailedPreconditionError(
            "a CUDA tensor, but this rdv was built without CUDA (RDV_WITH_CUDA)");
      }
      if (device.device_id < 0 || device.device_id >= cuda::DeviceCount()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "a tensor on CUDA device ", device.device_id, ", but this process has ",
            cuda::DeviceCount(), " GPUs",
            cuda::DeviceCount() == 0 ? absl::StrCat(": ", cuda::UnavailableReason()) : ""));
      }
      return MemoryLocation::Cuda(device.device_id);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a DLPack tensor on device type ", device.device_type,
                       ": rdv moves CPU and CUDA memory"));
  }
}

DLDevice DeviceOf(MemoryLocation location) {
  switch (location.kind) {
    case MemoryKind::kHost: return {kDLCPU, 0};
    case MemoryKind::kPinnedHost: return {kDLCUDAHost, 0};
    case MemoryKind::kCudaDevice: return {kDLCUDA, location.device};
  }
  return {kDLCPU, 0};
}

bool IsCContiguous(const DLTensor& tensor) {
  if (tensor.strides == nullptr) return true;
  int64_t expected = 1;
  for (int dim = tensor.ndim - 1; dim >= 0; --dim) {
    if (tensor.shape[dim] != 1 && tensor.strides[dim] != expected) return false;
    expected *= tensor.shape[dim];
  }
  return true;
}

// Runs the producer's deleter, with the GIL: it may drop Python objects.
void Delete(DLManagedTensor* managed) {
  if (managed->deleter == nullptr || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  managed->deleter(managed);
}

// What an exported tensor's DLManagedTensor points into, freed by its
// deleter.
struct Exported {
  Tensor tensor;
  std::vector<int64_t> shape;
  DLManagedTensor managed;
};

// rdv.DLPackTensor: a tensor handed out once through __dlpack__.
class DLPackTensor {
 public:
  explicit DLPackTensor(Tensor tensor) : tensor_(std::move(tensor)) {}

  py::capsule ToDLPack(const py::object& /*stream: the bytes are complete*/) const {
    const DLDataType type = [&] {
      absl::StatusOr<DLDataType> known = DLPackTypeOf(tensor_.dtype());
      if (!known.ok()) throw py::type_error(std::string(known.status().message()));
      return *known;
    }();
    auto exported = std::make_unique<Exported>();
    exported->tensor = tensor_;
    exported->shape.assign(tensor_.shape().dims().begin(), tensor_.shape().dims().end());
    DLTensor& dl = exported->managed.dl_tensor;
    dl.data = tensor_.data();
    dl.device = DeviceOf(tensor_.location());
    dl.ndim = static_cast<int32_t>(exported->shape.size());
    dl.dtype = type;
    dl.shape = exported->shape.data();
    dl.strides = nullptr;
    dl.byte_offset = 0;
    exported->managed.manager_ctx = exported.get();
    exported->managed.deleter = [](DLManagedTensor* self) {
      delete static_cast<Exported*>(self->manager_ctx);
    };
    DLManagedTensor* managed = &exported.release()->managed;
    // A capsule nobody consumed still owns the tensor.
    PyObject* capsule = PyCapsule_New(managed, kCapsuleName, [](PyObject* self) {
      if (!PyCapsule_IsValid(self, kCapsuleName)) return;
      auto* unconsumed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, kCapsuleName));
      unconsumed->deleter(unconsumed);
    });
    if (capsule == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::capsule>(capsule);
  }

  py::tuple Device() const {
    const DLDevice device = DeviceOf(tensor_.location());
    return py::make_tuple(static_cast<int>(device.device_type), device.device_id);
  }

  const Tensor& tensor() const { return tensor_; }

 private:
  Tensor tensor_;
};

}  // namespace

absl::StatusOr<Tensor> TensorOfDLPack(const py::object& producer) {
  py::object capsule = producer.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) {
    return absl::InvalidArgumentError("__dlpack__ did not return an unused DLPack capsule");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  // Consumed: the capsule no longer frees it; the tensor's buffer does.
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  std::unique_ptr<DLManagedTensor, void (*)(DLManagedTensor*)> owned(managed, &Delete);
  const DLTensor& dl = managed->dl_tensor;
  if (!IsCContiguous(dl)) {
    return absl::InvalidArgumentError(
        "send needs a C-contiguous tensor: pass tensor.contiguous() (torch) or "
        "cupy.ascontiguousarray, which copy");
  }
  RDV_ASSIGN_OR_RETURN(const DType dtype, DTypeOf(dl.dtype));
  RDV_ASSIGN_OR_RETURN(const MemoryLocation location, LocationOf(dl.device));
  RDV_ASSIGN_OR_RETURN(const TensorShape shape,
                       TensorShape::Create(absl::MakeConstSpan(dl.shape, dl.ndim)));
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype);
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  auto buffer = Buffer::Wrap(data, bytes, location, [managed = owned.release()] {
    Delete(managed);
  });
  return Tensor::FromBuffer(dtype, shape, std::move(buffer));
}

py::object DLPackOf(const Tensor& tensor) { return py::cast(DLPackTensor(tensor)); }

void BindDLPack(py::module_& module) {
  py::class_<DLPackTensor>(module, "DLPackTensor",
                           "A received tensor for torch/cupy/numpy.from_dlpack (no copy).")
      .def("__dlpack__", &DLPackTensor::ToDLPack, py::arg("stream") = py::none())
      .def("__dlpack_device__", &DLPackTensor::Device)
      .def_property_readonly("shape", [](const DLPackTensor& t) {
        return std::vector<int64_t>(t.tensor().shape().dims().begin(),
                                    t.tensor().shape().dims().end());
      })
      .def_property_readonly("dtype",
                             [](const DLPackTensor& t) {
                               return std::string(DTypeName(t.tensor().dtype()));
                             })
      .def_property_readonly("device", [](const DLPackTensor& t) {
        return t.tensor().location().ToString();
      });
}

}  // namespace rdv::python
