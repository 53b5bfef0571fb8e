// Tensors through DLPack (the `__dlpack__` / `__dlpack_device__` protocol
// of torch, cupy, jax and numpy), the way GPU memory crosses between rdv
// and Python. Host memory crosses too; numpy arrays have their own path.
#pragma once

#include <pybind11/pybind11.h>

#include "core/tensor.h"

namespace rdv::python {

// The memory of `producer` (an object with __dlpack__) as a tensor, without
// a copy; the producer's deleter runs when the last copy of the tensor
// goes. INVALID_ARGUMENT for a strided tensor, a dtype rdv lacks, or a
// device other than the CPU and CUDA; FAILED_PRECONDITION for CUDA memory
// in a build without CUDA. CUDA memory must be ready: its producer's
// stream synchronized.
absl::StatusOr<Tensor> TensorOfDLPack(const pybind11::object& producer);

// `tensor` as an rdv.DLPackTensor: hand it to torch.from_dlpack,
// cupy.from_dlpack or numpy.from_dlpack, which take its memory without a
// copy. Its bytes are complete (a received GPU tensor is visible to the GPU
// before the Recv completes), so the consumer's stream needs no wait.
pybind11::object DLPackOf(const Tensor& tensor);

// Registers rdv.DLPackTensor.
void BindDLPack(pybind11::module_& module);

}  // namespace rdv::python
