#include "control/recv_tensor_call.h"

#include <grpcpp/support/sync_stream.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/protocol.h"
#include "core/device_copy.h"

namespace rdv::control {
namespace {

absl::Status SerializeRequest(const RecvTensorRequest& request, grpc::ByteBuffer* buffer) {
  bool own_buffer = false;
  return FromGrpcStatus(
      grpc::SerializationTraits<RecvTensorRequest>::Serialize(request, buffer, &own_buffer));
}

}  // namespace

RecvTensorCall::RecvTensorCall(std::shared_ptr<WorkerClient> worker, RecvTensorRequest request,
                               MemoryLocation destination, Detach detach, Done done)
    : worker_(std::move(worker)),
      request_(std::move(request)),
      destination_(destination),
      detach_(std::move(detach)),
      done_(std::move(done)) {}

void RecvTensorCall::Start() {
  if (const absl::Status serialized = SerializeRequest(request_, &request_buffer_);
      !serialized.ok()) {
    Complete(serialized, Tensor(), false);
    return;
  }
  grpc::internal::ClientCallbackReaderFactory<grpc::ByteBuffer>::Create(
      worker_->channel.get(), *worker_->recv_tensor, &context_, &request_buffer_, this);
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
  // The status follows the last chunk; a further read would only add a
  // round through the reactor.
  if (!decoder_.complete()) StartRead(&response_);
}

absl::Status RecvTensorStatus(const WorkerClient& worker, const grpc::Status& status,
                              const absl::Status& abort_status) {
  if (!abort_status.ok()) return abort_status;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat("worker ", worker.worker_name, " at ",
                                               worker.address,
                                               " is unreachable or died: ", status.error_message()));
  }
  return FromGrpcStatus(status);
}

absl::Status RecvTensorCall::FinalStatus(const grpc::Status& status) {
  std::lock_guard lock(mu_);
  return RecvTensorStatus(*worker_, status, abort_status_);
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

BlockingRecvTensorCall::BlockingRecvTensorCall(std::shared_ptr<WorkerClient> worker,
                                               RecvTensorRequest request, absl::Duration timeout)
    : worker_(std::move(worker)), request_(std::move(request)) {
  if (timeout < absl::InfiniteDuration()) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
}

void BlockingRecvTensorCall::Abort(const absl::Status& status) {
  {
    std::lock_guard lock(mu_);
    if (abort_status_.ok()) abort_status_ = status;
  }
  context_.TryCancel();
}

absl::Status BlockingRecvTensorCall::Run(Tensor* tensor, bool* is_dead) {
  grpc::ByteBuffer request;
  RDV_RETURN_IF_ERROR(SerializeRequest(request_, &request));
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          worker_->channel.get(), *worker_->recv_tensor, &context_, request));
  absl::Status decoded;
  grpc::ByteBuffer chunk;
  while (decoded.ok() && !decoder_.complete() && reader->Read(&chunk)) {
    decoded = decoder_.Consume(&chunk);
  }
  if (!decoded.ok()) Abort(decoded);
  const grpc::Status finished = reader->Finish();
  {
    std::lock_guard lock(mu_);
    RDV_RETURN_IF_ERROR(RecvTensorStatus(*worker_, finished, abort_status_));
  }
  RDV_ASSIGN_OR_RETURN(*tensor, decoder_.Finish());
  *is_dead = decoder_.meta().is_dead();
  return absl::OkStatus();
}

}  // namespace rdv::control
