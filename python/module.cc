// rdv._rdv: the Python module's native half (python/rdv/__init__.py is the
// other). Arrays cross without copies: a sent numpy array is the tensor's
// buffer (kept alive, by reference, until rdv lets go of it), and a
// received tensor's buffer becomes the returned array's memory. Every wait
// and every transfer runs with the GIL released; callbacks from rdv's
// threads take it before touching Python objects.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/worker_server.h"
#include "core/cuda.h"
#include "core/notification.h"
#include "core/rendezvous_key.h"
#include "core/version.h"
#include "python/dlpack.h"

namespace py = pybind11;

namespace rdv::python {
namespace {

// How long a blocking Recv waits between looks at Python's signal flag:
// Ctrl-C cancels a waiting Recv within this.
constexpr absl::Duration kSignalCheckInterval = absl::Milliseconds(50);

PyObject* error_type = nullptr;  // rdv.Error, made at import

// rdv.Error(message) with .code (absl's status code number) and .code_name.
py::object ErrorOf(const absl::Status& status) {
  py::object error = py::reinterpret_borrow<py::object>(error_type)(std::string(status.message()));
  error.attr("code") = static_cast<int>(status.code());
  error.attr("code_name") = absl::StatusCodeToString(status.code());
  return error;
}

[[noreturn]] void Raise(const absl::Status& status) {
  PyErr_SetObject(error_type, ErrorOf(status).ptr());
  throw py::error_already_set();
}

void RaiseIfError(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T ValueOrRaise(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

absl::StatusOr<DType> DTypeOfArray(const py::dtype& dtype) {
  const auto size = dtype.itemsize();
  switch (dtype.kind()) {
    case 'f':
      if (size == 2) return DType::kHalf;
      if (size == 4) return DType::kFloat;
      if (size == 8) return DType::kDouble;
      break;
    case 'i':
      if (size == 1) return DType::kInt8;
      if (size == 2) return DType::kInt16;
      if (size == 4) return DType::kInt32;
      if (size == 8) return DType::kInt64;
      break;
    case 'u':
      if (size == 1) return DType::kUInt8;
      if (size == 2) return DType::kUInt16;
      if (size == 4) return DType::kUInt32;
      if (size == 8) return DType::kUInt64;
      break;
    case 'b':
      return DType::kBool;
    case 'c':
      if (size == 8) return DType::kComplex64;
      if (size == 16) return DType::kComplex128;
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("numpy dtype '", dtype.attr("name").cast<std::string>(),
                   "' has no rdv dtype (rdv moves bool, int8-64, uint8-64, float16/32/64 and "
                   "complex64/128 arrays)"));
}

absl::StatusOr<py::dtype> ArrayDTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kHalf: return py::dtype("float16");
    case DType::kFloat: return py::dtype("float32");
    case DType::kDouble: return py::dtype("float64");
    case DType::kInt8: return py::dtype("int8");
    case DType::kInt16: return py::dtype("int16");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt64: return py::dtype("int64");
    case DType::kUInt8: return py::dtype("uint8");
    case DType::kUInt16: return py::dtype("uint16");
    case DType::kUInt32: return py::dtype("uint32");
    case DType::kUInt64: return py::dtype("uint64");
    case DType::kBool: return py::dtype("bool");
    case DType::kComplex64: return py::dtype("complex64");
    case DType::kComplex128: return py::dtype("complex128");
    default:
      return absl::UnimplementedError(absl::StrCat(
          "a ", DTypeName(dtype), " tensor has no numpy dtype; receive it from C++"));
  }
}

// The sent array's memory as a host tensor; the array stays referenced
// until the last copy of the tensor goes, on whichever thread that is.
absl::StatusOr<Tensor> TensorOfArray(const py::array& array) {
  if ((array.flags() & py::array::c_style) == 0) {
    return absl::InvalidArgumentError(
        "send needs a C-contiguous array: pass numpy.ascontiguousarray(a), which copies");
  }
  RDV_ASSIGN_OR_RETURN(DType dtype, DTypeOfArray(array.dtype()));
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  RDV_ASSIGN_OR_RETURN(TensorShape shape, TensorShape::Create(dims));
  auto* keep = new py::object(array);
  auto buffer = Buffer::Wrap(const_cast<void*>(array.data()), static_cast<size_t>(array.nbytes()),
                             MemoryLocation::Host(), [keep] {
                               // After the interpreter is gone there is
                               // nothing left to release.
                               if (!Py_IsInitialized()) return;
                               py::gil_scoped_acquire gil;
                               delete keep;
                             });
  return Tensor::FromBuffer(dtype, shape, std::move(buffer));
}

// The received tensor as an array over its own buffer (no copy). A dead
// tensor is None.
py::object ArrayOfTensor(const Tensor& value, bool is_dead) {
  if (is_dead) return py::none();
  if (!value.location().is_host()) {
    Raise(absl::UnimplementedError(absl::StrCat(
        "received ", value.DebugString(), " in GPU memory, which numpy cannot hold: "
        "recv(..., dlpack=True) hands it to torch/cupy.from_dlpack")));
  }
  const py::dtype dtype = ValueOrRaise(ArrayDTypeOf(value.dtype()));
  std::vector<py::ssize_t> shape(value.shape().dims().begin(), value.shape().dims().end());
  auto* owner = new Tensor(value);
  py::capsule base(owner, [](void* tensor) { delete static_cast<Tensor*>(tensor); });
  return py::array(dtype, shape, value.data(), base);
}

ParsedKey KeyOrRaise(const std::string& key) { return ValueOrRaise(ParsedKey::Parse(key)); }

// A numpy array (its own path: numpy's DLPack has no bool), or anything
// with __dlpack__ (torch, cupy, jax: GPU memory too).
absl::StatusOr<Tensor> TensorOf(const py::object& value) {
  if (py::isinstance<py::array>(value)) return TensorOfArray(value.cast<py::array>());
  if (py::hasattr(value, "__dlpack__")) return TensorOfDLPack(value);
  return absl::InvalidArgumentError(absl::StrCat(
      "send takes a numpy array or a tensor with __dlpack__ (torch, cupy), not a ",
      py::str(py::type::of(value).attr("__name__")).cast<std::string>()));
}

// A Recv in flight from Python: its cancellation, and the wake-up of a
// blocking wait.
struct PendingRecv {
  CancellationManager cancellation;
  Notification done;
  absl::Status status;
  Tensor value;
  bool is_dead = false;
};

// The value as the caller asked for it: a numpy array, or an
// rdv.DLPackTensor; None for a dead tensor.
py::object Received(const PendingRecv& pending, bool dlpack) {
  if (dlpack && !pending.is_dead) return DLPackOf(pending.value);
  return ArrayOfTensor(pending.value, pending.is_dead);
}

class Worker {
 public:
  static std::unique_ptr<Worker> Start(int task, const py::object& cluster,
                                       const std::string& protocol, const std::string& listen,
                                       const std::string& job,
                                       const std::map<std::string, std::string>& settings,
                                       bool from_environment) {
    control::WorkerServerOptions options;
    if (from_environment) options = ValueOrRaise(control::WorkerServerOptions::FromEnvironment());
    options.job = job;
    options.task = task;
    options.protocol = protocol;
    options.listen_address = listen;
    options.cluster = ClusterOf(cluster);
    for (const auto& [name, value] : settings) options.data_plane.transport_settings[name] = value;
    absl::StatusOr<std::unique_ptr<control::WorkerServer>> server;
    {
      py::gil_scoped_release nogil;
      server = control::WorkerServer::Start(std::move(options));
    }
    return std::unique_ptr<Worker>(new Worker(ValueOrRaise(std::move(server))));
  }

  ~Worker() { Close(); }

  void Close() {
    py::gil_scoped_release nogil;
    server_.reset();
  }

  control::WorkerServer& server() const {
    if (server_ == nullptr) Raise(absl::FailedPreconditionError("the worker was closed"));
    return *server_;
  }

  void Send(int64_t step, const std::string& key, const py::object& value, bool is_dead) {
    const ParsedKey parsed = KeyOrRaise(key);
    Tensor tensor = ValueOrRaise(TensorOf(value));
    auto rendezvous = server().rendezvous_mgr().Find(step);
    absl::Status status;
    {
      py::gil_scoped_release nogil;
      status = rendezvous->Send(parsed, {}, tensor, is_dead);
    }
    RaiseIfError(status);
  }

  py::object Recv(int64_t step, const std::string& key, std::optional<double> timeout_seconds,
                  bool dlpack) {
    auto pending = StartRecv(step, key, dlpack, nullptr);
    const absl::Time deadline = timeout_seconds ? absl::Now() + absl::Seconds(*timeout_seconds)
                                                : absl::InfiniteFuture();
    bool timed_out = false;
    while (true) {
      bool finished;
      {
        py::gil_scoped_release nogil;
        finished = pending->done.WaitForNotificationWithTimeout(
            std::min(kSignalCheckInterval, deadline - absl::Now()));
      }
      if (finished) break;
      if (PyErr_CheckSignals() != 0) {
        WithdrawAndWait(*pending);
        throw py::error_already_set();
      }
      if (absl::Now() >= deadline) {
        timed_out = true;
        WithdrawAndWait(*pending);
        break;
      }
    }
    if (timed_out && absl::IsCancelled(pending->status)) {
      Raise(absl::DeadlineExceededError(absl::StrCat(
          "nothing arrived for ", key, " on step ", step, " within ", *timeout_seconds, " s")));
    }
    RaiseIfError(pending->status);
    return Received(*pending, dlpack);
  }

  // `callback(error, array)` runs once, with the GIL, on an rdv thread (or
  // this one when the value is already here). The returned handle cancels.
  std::shared_ptr<PendingRecv> RecvAsync(int64_t step, const std::string& key, bool dlpack,
                                         py::function callback) {
    auto shared_callback = std::make_shared<py::function>(std::move(callback));
    return StartRecv(step, key, dlpack, [shared_callback, dlpack](PendingRecv& pending) {
      py::gil_scoped_acquire gil;
      // A value numpy cannot hold fails the future as an error, too.
      py::object error = py::none();
      py::object array = py::none();
      if (!pending.status.ok()) {
        error = ErrorOf(pending.status);
      } else {
        try {
          array = Received(pending, dlpack);
        } catch (py::error_already_set& unusable) {
          error = unusable.value();
        }
      }
      try {
        (*shared_callback)(error, array);
      } catch (py::error_already_set& raised) {
        raised.discard_as_unraisable("rdv recv_async callback");
      }
      // Let go of the callback while holding the GIL. (The value stays
      // with the pending Recv, which shares its buffer with the result.)
      *shared_callback = py::function();
    });
  }

  void Abort(int64_t step, const std::string& message) {
    auto rendezvous = server().rendezvous_mgr().Find(step);
    py::gil_scoped_release nogil;
    rendezvous->StartAbort(absl::AbortedError(message));
  }

  void CleanupStep(int64_t step) {
    control::WorkerServer& worker = server();
    py::gil_scoped_release nogil;
    worker.rendezvous_mgr().Cleanup(step);
  }

 private:
  explicit Worker(std::unique_ptr<control::WorkerServer> server) : server_(std::move(server)) {}

  static control::ClusterSpec ClusterOf(const py::object& cluster) {
    if (cluster.is_none()) return {};
    if (py::isinstance<py::str>(cluster)) {
      return ValueOrRaise(control::ClusterSpec::FromFlag(cluster.cast<std::string>()));
    }
    if (!py::isinstance<py::dict>(cluster)) {
      Raise(absl::InvalidArgumentError(
          "cluster: expected 'job=h:p,h:p;job2=h:p' or {'job': ['h:p', ...]}"));
    }
    control::ClusterSpec spec;
    for (auto [job, addresses] : cluster.cast<py::dict>()) {
      int task = 0;
      for (py::handle address : addresses) {
        spec.SetAddress(job.cast<std::string>(), task++, address.cast<std::string>());
      }
    }
    return spec;
  }

  using Finish = std::function<void(PendingRecv&)>;

  // A DLPack Recv lands where the key's destination device says (GPU
  // memory for a GPU); a numpy Recv in host memory.
  std::shared_ptr<PendingRecv> StartRecv(int64_t step, const std::string& key, bool dlpack,
                                         Finish finish) {
    const ParsedKey parsed = KeyOrRaise(key);
    auto rendezvous = server().rendezvous_mgr().Find(step);
    auto pending = std::make_shared<PendingRecv>();
    RendezvousArgs args;
    args.alloc_attrs.on_host = !dlpack;
    args.cancellation_manager = &pending->cancellation;
    py::gil_scoped_release nogil;
    rendezvous->RecvAsync(
        parsed, args,
        [pending, finish = std::move(finish)](const absl::Status& status, const RendezvousArgs&,
                                              const RendezvousArgs&, const Tensor& value,
                                              bool is_dead) {
          pending->status = status;
          pending->value = value;
          pending->is_dead = is_dead;
          if (finish) finish(*pending);
          pending->done.Notify();
        });
    return pending;
  }

  static void WithdrawAndWait(PendingRecv& pending) {
    py::gil_scoped_release nogil;
    pending.cancellation.StartCancel();
    pending.done.WaitForNotification();
  }

  std::unique_ptr<control::WorkerServer> server_;
};

}  // namespace
}  // namespace rdv::python

PYBIND11_MODULE(_rdv, m) {
  using rdv::python::Worker;
  namespace rp = rdv::python;
  m.doc() = "rdv's native module; import rdv instead";
  rp::error_type = PyErr_NewExceptionWithDoc(
      "rdv.Error", "An rdv status that is not OK: .code (a number), .code_name, the message.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::reinterpret_borrow<py::object>(rp::error_type);
  m.attr("__version__") = std::string(rdv::Version());
  rp::BindDLPack(m);
  m.def("cuda_device_count", &rdv::cuda::DeviceCount,
        "GPUs this process can use: 0 without CUDA in this build, a driver or a GPU");
  m.def("cuda_unavailable_reason", &rdv::cuda::UnavailableReason,
        "Why cuda_device_count() is 0; empty when there are GPUs");

  m.def("create_key",
        [](const std::string& src_device, uint64_t src_incarnation, const std::string& dst_device,
           const std::string& name, int64_t frame_id, int64_t iter_id) {
          return rdv::CreateRendezvousKey(src_device, src_incarnation, dst_device, name,
                                          {frame_id, iter_id});
        },
        py::arg("src_device"), py::arg("src_incarnation"), py::arg("dst_device"), py::arg("name"),
        py::arg("frame_id") = 0, py::arg("iter_id") = 0);
  m.def("parse_key", [](const std::string& key) {
    const rdv::ParsedKey parsed = rp::KeyOrRaise(key);
    py::dict parts;
    parts["src_device"] = std::string(parsed.src_device());
    parts["src_incarnation"] = parsed.src_incarnation();
    parts["dst_device"] = std::string(parsed.dst_device());
    parts["edge_name"] = std::string(parsed.edge_name());
    parts["frame_iter"] = std::string(parsed.frame_iter());
    return parts;
  });

  // cancel() returns once the Recv's callback has run: withdrawn (its
  // callback saw CANCELLED) or too late (it saw the value).
  py::class_<rp::PendingRecv, std::shared_ptr<rp::PendingRecv>>(m, "PendingRecv")
      .def("cancel", [](rp::PendingRecv& pending) {
        py::gil_scoped_release nogil;
        pending.cancellation.StartCancel();
        pending.done.WaitForNotification();
      });

  py::class_<Worker>(m, "Worker")
      .def(py::init(&Worker::Start), py::arg("task") = 0, py::arg("cluster") = py::none(),
           py::arg("protocol") = "grpc", py::arg("listen") = "127.0.0.1:0",
           py::arg("job") = "worker",
           py::arg("transport_settings") = std::map<std::string, std::string>{},
           py::arg("from_environment") = true)
      .def_property_readonly("name", [](const Worker& w) { return w.server().worker_name(); })
      .def_property_readonly("address", [](const Worker& w) { return w.server().address(); })
      .def_property_readonly("incarnation",
                             [](const Worker& w) { return w.server().incarnation(); })
      .def("send", &Worker::Send, py::arg("step"), py::arg("key"), py::arg("value"),
           py::arg("is_dead") = false)
      .def("recv", &Worker::Recv, py::arg("step"), py::arg("key"), py::arg("timeout") = py::none(),
           py::arg("dlpack") = false)
      .def("_recv_async", &Worker::RecvAsync)
      .def("abort", &Worker::Abort, py::arg("step"), py::arg("message") = "aborted from Python")
      .def("cleanup_step", &Worker::CleanupStep, py::arg("step"))
      .def("close", &Worker::Close);
}
