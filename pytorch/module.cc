// rdv._torch: the native half of rdv.torch (python/rdv/torch.py registers
// it with torch.distributed as the backend "rdv"). Built against Debian's
// libtorch, whose pybind11 types (Store, ProcessGroup) it shares.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "pytorch/process_group.h"

namespace py = pybind11;

PYBIND11_MODULE(_torch, m) {
  using rdv::pytorch::ProcessGroupRdv;
  m.doc() = "rdv's torch.distributed backend; import rdv.torch instead";
  py::module::import("torch.distributed");
  ProcessGroupRdv::SetBlockingSection([](absl::FunctionRef<void()> body) {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      body();
    } else {
      body();
    }
  });
  py::class_<ProcessGroupRdv, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupRdv>>(
      m, "ProcessGroupRdv")
      .def_property_readonly("address", &ProcessGroupRdv::address)
      .def_property_readonly("protocol", &ProcessGroupRdv::protocol)
      .def("stats", &ProcessGroupRdv::stats);
  // torch calls this with (store, rank, world_size, timeout); it blocks on
  // the store, so the GIL is let go.
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) {
        return ProcessGroupRdv::Create(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
}
