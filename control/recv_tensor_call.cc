#include "control/recv_tensor_call.h"

#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/protocol.h"
#include "core/device_copy.h"
#include "core/notification.h"

namespace rdv::control {
namespace {

absl::Status SerializeRequest(const RecvTensorRequest& request, grpc::ByteBuffer* buffer) {
  bool own_buffer = false;
  return FromGrpcStatus(
      grpc::SerializationTraits<RecvTensorRequest>::Serialize(request, buffer, &own_buffer));
}

// Waits on `queue` for `tag` until `deadline`, passing over the call's
// start event; the result of that operation, false on timeout.
bool AwaitTag(grpc::CompletionQueue* queue, void* tag,
              absl::Time deadline = absl::InfiniteFuture()) {
  void* got = nullptr;
  bool ok = false;
  for (;;) {
    const auto next = deadline == absl::InfiniteFuture()
                          ? (queue->Next(&got, &ok) ? grpc::CompletionQueue::GOT_EVENT
                                                    : grpc::CompletionQueue::SHUTDOWN)
                          : queue->AsyncNext(&got, &ok, absl::ToChronoTime(deadline));
    if (next != grpc::CompletionQueue::GOT_EVENT) return false;
    if (got == tag) return ok;
  }
}

std::shared_ptr<Allocator> DestinationAllocator(DataPlane* data_plane) {
  if (data_plane == nullptr) return HostAllocator();
  return data_plane->allocator();
}

}  // namespace

// Joins the end of the RecvTensor stream with the end of the data-plane
// transfer it described. A stream that fails first finishes the Recv at
// once; the transfer's late completion then finds `finished` and only
// drops its reference.
struct FetchJoin {
  std::mutex mu;
  bool transport_started = false;
  bool transport_done = false;
  bool stream_done = false;
  bool finished = false;
  absl::Status transport_status;
  absl::Status stream_status;
};

void ReleaseFetched(const WorkerClient& worker, int64_t step_id, const TensorMeta& meta) {
  if (!meta.has_transport() || meta.transport().op() != RDV_TRANSPORT_OP_GET) return;
  ReleasedTransfer transfer;
  transfer.set_step_id(step_id);
  transfer.set_transfer_id(meta.transport().transfer_id());
  transfer.set_length(meta.transport().length());
  worker.releases->Release(transfer);
}

RecvTensorCall::RecvTensorCall(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                               RecvTensorRequest request, MemoryLocation destination,
                               Detach detach, Done done)
    : worker_(std::move(worker)),
      calls_(worker_->calls),
      data_plane_(data_plane),
      join_(std::make_shared<FetchJoin>()),
      request_(std::move(request)),
      destination_(destination),
      detach_(std::move(detach)),
      done_(std::move(done)),
      decoder_(DestinationAllocator(data_plane)) {
  calls_->Begin();
}

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
  if (!decoder_.complete()) {
    StartRead(&response_);
  } else if (decoder_.has_transport()) {
    StartFetch();
  }
}

void RecvTensorCall::StartFetch() {
  if (data_plane_ == nullptr) {
    Abort(absl::FailedPreconditionError("the producer answered with a transport descriptor, "
                                        "but this worker has no data plane"));
    return;
  }
  {
    std::lock_guard lock(join_->mu);
    join_->transport_started = true;
  }
  data_plane_->Fetch(decoder_.meta().transport(), decoder_.tensor(),
                     [this, join = join_](absl::Status status) {
                       {
                         std::lock_guard lock(join->mu);
                         join->transport_done = true;
                         join->transport_status = std::move(status);
                         if (join->finished || !join->stream_done) return;
                         join->finished = true;
                       }
                       Finish();
                     });
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
  {
    std::lock_guard lock(join_->mu);
    join_->stream_done = true;
    join_->stream_status = status;
    if (join_->transport_started && !join_->transport_done && status.ok()) return;
    join_->finished = true;
  }
  Finish();
}

void RecvTensorCall::Finish() {
  absl::Status status;
  {
    std::lock_guard lock(join_->mu);
    status = join_->stream_status;
    if (status.ok() && join_->transport_started) status = join_->transport_status;
  }
  if (!status.ok()) {
    Complete(status, Tensor(), false);
    return;
  }
  ReleaseFetched(*worker_, request_.step_id(), decoder_.meta());
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
  // Drops the WorkerClient (and channel) reference while the cache, which
  // waits for calls_, still holds its own: never the last one, here on
  // gRPC's thread.
  const std::shared_ptr<CallsInFlight> calls = calls_;
  delete this;
  calls->End();
}

BlockingRecvTensorCall::BlockingRecvTensorCall(std::shared_ptr<WorkerClient> worker,
                                               DataPlane* data_plane, RecvTensorRequest request,
                                               absl::Duration timeout,
                                               absl::Duration peer_timeout)
    : worker_(std::move(worker)),
      data_plane_(data_plane),
      request_(std::move(request)),
      timeout_(timeout),
      peer_timeout_(peer_timeout),
      decoder_(DestinationAllocator(data_plane)) {}

bool BlockingRecvTensorCall::Withdrawn() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + peer_timeout_));
  WithdrawRecvTensorRequest request;
  request.set_step_id(request_.step_id());
  request.set_request_id(request_.request_id());
  WithdrawRecvTensorResponse response;
  const grpc::Status status = worker_->stub->WithdrawRecvTensor(&context, request, &response);
  // A producer that cannot answer cannot send the value either.
  return !status.ok() || response.withdrawn();
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
  // This thread drives its own completion queue: gRPC then reads the
  // answer on this thread instead of waking it from another, and the start
  // and the first read are in flight together.
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::ClientAsyncReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientAsyncReaderFactory<grpc::ByteBuffer>::Create(
          worker_->channel.get(), &queue, *worker_->recv_tensor, &context_, request,
          /*start=*/true, &queue));
  absl::Status decoded;
  grpc::ByteBuffer chunk;
  bool reading = true;
  bool timed_out = false;
  // Only the wait for the answer is bounded; once bytes flow, they finish.
  absl::Time deadline = timeout_ < absl::InfiniteDuration() ? absl::Now() + timeout_
                                                            : absl::InfiniteFuture();
  while (reading && decoded.ok() && !decoder_.complete()) {
    reader->Read(&chunk, &chunk);
    bool got = AwaitTag(&queue, &chunk, deadline);
    if (!got && absl::Now() >= deadline) {
      timed_out = Withdrawn();
      if (timed_out) Abort(absl::DeadlineExceededError("the Recv timed out"));
      deadline = absl::InfiniteFuture();
      got = AwaitTag(&queue, &chunk, deadline);
    }
    reading = got && !timed_out;
    if (reading) decoded = decoder_.Consume(&chunk);
    deadline = absl::InfiniteFuture();
  }
  if (decoded.ok() && decoder_.has_transport() && data_plane_ == nullptr) {
    decoded = absl::FailedPreconditionError(
        "the producer answered with a transport descriptor, but this worker has no data plane");
  }
  if (!decoded.ok()) Abort(decoded);
  // The transfer starts before the stream's status arrives (with op tag the
  // producer sends it only once its send is done).
  struct Fetched {
    Notification done;
    absl::Status status;
  };
  auto fetched = std::make_shared<Fetched>();
  if (decoded.ok() && decoder_.has_transport()) {
    data_plane_->Fetch(decoder_.meta().transport(), decoder_.tensor(),
                       [fetched](absl::Status status) {
                         fetched->status = std::move(status);
                         fetched->done.Notify();
                       });
  } else {
    fetched->done.Notify();
  }
  grpc::Status finished;
  reader->Finish(&finished, &finished);
  AwaitTag(&queue, &finished);
  queue.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (queue.Next(&ignored_tag, &ignored_ok)) {
  }
  {
    std::lock_guard lock(mu_);
    RDV_RETURN_IF_ERROR(RecvTensorStatus(*worker_, finished, abort_status_));
  }
  fetched->done.WaitForNotification();
  RDV_RETURN_IF_ERROR(fetched->status);
  ReleaseFetched(*worker_, request_.step_id(), decoder_.meta());
  RDV_ASSIGN_OR_RETURN(*tensor, decoder_.Finish());
  *is_dead = decoder_.meta().is_dead();
  return absl::OkStatus();
}

}  // namespace rdv::control
