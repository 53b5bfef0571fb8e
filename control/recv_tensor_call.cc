#include "control/recv_tensor_call.h"

#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/protocol.h"
#include "core/device_copy.h"

namespace rdv::control {

RecvTensorCall::RecvTensorCall(std::shared_ptr<WorkerClient> worker, RecvTensorRequest request,
                               MemoryLocation destination, Detach detach, Done done)
    : worker_(std::move(worker)),
      request_(std::move(request)),
      destination_(destination),
      detach_(std::move(detach)),
      done_(std::move(done)) {}

void RecvTensorCall::Start() {
  bool own_buffer = false;
  const grpc::Status serialized = grpc::SerializationTraits<RecvTensorRequest>::Serialize(
      request_, &request_buffer_, &own_buffer);
  if (!serialized.ok()) {
    Complete(FromGrpcStatus(serialized), Tensor(), false);
    return;
  }
  worker_->generic->PrepareBidiStreamingCall(&context_, kRecvTensorMethod, grpc::StubOptions(),
                                             this);
  StartWriteLast(&request_buffer_, grpc::WriteOptions());
  StartRead(&response_);
  StartCall();
}

void RecvTensorCall::Abort(const absl::Status& status) {
  {
    std::lock_guard lock(mu_);
    if (abort_status_.ok()) abort_status_ = status;
  }
  context_.TryCancel();
}

void RecvTensorCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  const absl::Status decoded = decoder_.Consume(&response_);
  if (!decoded.ok()) {
    Abort(decoded);
    return;
  }
  response_.Clear();
  StartRead(&response_);
}

absl::Status RecvTensorCall::FinalStatus(const grpc::Status& status) {
  {
    std::lock_guard lock(mu_);
    if (!abort_status_.ok()) return abort_status_;
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat("worker ", worker_->worker_name, " at ",
                                               worker_->address,
                                               " is unreachable or died: ", status.error_message()));
  }
  return FromGrpcStatus(status);
}

void RecvTensorCall::OnDone(const grpc::Status& grpc_status) {
  const absl::Status status = FinalStatus(grpc_status);
  if (!status.ok()) {
    Complete(status, Tensor(), false);
    return;
  }
  absl::StatusOr<Tensor> tensor = decoder_.Finish();
  const bool is_dead = decoder_.has_meta() && decoder_.meta().is_dead();
  if (!tensor.ok()) {
    Complete(tensor.status(), Tensor(), false);
    return;
  }
  if (destination_.is_host() || !tensor->IsInitialized()) {
    Complete(absl::OkStatus(), *std::move(tensor), is_dead);
    return;
  }
  CopyTensorAsync(*tensor, destination_, [this](absl::StatusOr<Tensor> copied) {
    if (copied.ok()) {
      Complete(absl::OkStatus(), *std::move(copied), false);
    } else {
      Complete(copied.status(), Tensor(), false);
    }
  });
}

void RecvTensorCall::Complete(absl::Status status, Tensor tensor, bool is_dead) {
  std::move(detach_)(this);
  std::move(done_)(std::move(status), std::move(tensor), is_dead);
  delete this;
}

}  // namespace rdv::control
