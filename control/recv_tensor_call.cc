#include "control/recv_tensor_call.h"

#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/peer_handshake.h"
#include "core/notification.h"

namespace rdv::control {
namespace {

// What asks the producer to withdraw `recv`, and whether its answer means
// that nothing will arrive: withdrawn, or a producer that cannot answer
// (which cannot send the value either).
WithdrawRecvTensorRequest WithdrawalOf(const RecvTensorRequest& recv) {
  WithdrawRecvTensorRequest request;
  request.set_step_id(recv.step_id());
  request.set_request_id(recv.request_id());
  return request;
}

bool NothingWillArrive(const grpc::Status& answer, const WithdrawRecvTensorResponse& response) {
  return !answer.ok() || response.withdrawn();
}

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

void DrainQueue(grpc::CompletionQueue* queue) {
  queue->Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (queue->Next(&ignored_tag, &ignored_ok)) {
  }
}

// Whether the producer may answer in one message: not when the payload
// may come as a tagged send, which the consumer posts after reading the
// meta (control/peer_handshake.h).
RecvTensorRequest WithSingleMessage(RecvTensorRequest request, const WorkerClient& worker,
                                    const DataPlane* data_plane) {
  request.set_single_message(OneMessageAnswers(worker, data_plane != nullptr));
  return request;
}

// Ends `exchange` with `status` before (or instead of) its gRPC call.
void EndWith(RecvExchange& exchange, const absl::Status& status) {
  exchange.Abort(status);
  exchange.CallEnded(grpc::Status::OK);
}

}  // namespace

RecvTensorCall::RecvTensorCall(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                               RecvTensorRequest request, MemoryLocation destination,
                               Detach detach, Done done, std::shared_ptr<Buffer> landing)
    : counted_(worker->calls),
      worker_(std::move(worker)),
      request_(std::move(request)),
      detach_(std::move(detach)),
      done_(std::move(done)),
      exchange_(RecvExchange::Create(
          worker_, data_plane, request_, destination,
          [this](absl::Status status, Tensor tensor, bool is_dead) {
            Complete(std::move(status), std::move(tensor), is_dead);
          },
          std::move(landing))) {}

void RecvTensorCall::Start() {
  if (const absl::Status serialized = SerializeRequest(request_, &request_buffer_);
      !serialized.ok()) {
    EndWith(*exchange_, serialized);
    return;
  }
  grpc::internal::ClientCallbackReaderFactory<grpc::ByteBuffer>::Create(
      worker_->channel.get(), *worker_->recv_tensor, &context_, &request_buffer_, this);
  StartRead(&response_);
  StartCall();
}

void RecvTensorCall::Abort(const absl::Status& status) {
  exchange_->Abort(status);
  context_.TryCancel();
}

void RecvTensorCall::Cancel(const absl::Status& status) {
  {
    std::lock_guard lock(liveness_->mu);
    if (liveness_->cancelled.ok()) liveness_->cancelled = status;
  }
  // Counted like any call that holds the worker's channel (its context
  // does): the cache waits for it, so the channel's last reference never
  // goes with this callback, on gRPC's thread (an abort at exit, seen).
  struct Withdrawal {
    explicit Withdrawal(std::shared_ptr<CallsInFlight> calls) : counted(std::move(calls)) {}
    CountedCall counted;  // first: ends last
    grpc::ClientContext context;
    WithdrawRecvTensorRequest request;
    WithdrawRecvTensorResponse response;
  };
  auto withdrawal = std::make_shared<Withdrawal>(worker_->calls);
  withdrawal->context.set_deadline(absl::ToChronoTime(absl::Now() + worker_->peer_timeout));
  withdrawal->request = WithdrawalOf(request_);
  worker_->stub->async()->WithdrawRecvTensor(
      &withdrawal->context, &withdrawal->request, &withdrawal->response,
      [withdrawal, liveness = liveness_, status](const grpc::Status& answer) {
        if (!NothingWillArrive(answer, withdrawal->response)) return;
        std::lock_guard lock(liveness->mu);
        if (liveness->call != nullptr) liveness->call->Abort(status);
      });
}

void RecvTensorCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  const absl::Status decoded = exchange_->Consume(&response_);
  if (!decoded.ok()) {
    Abort(decoded);
    return;
  }
  response_.Clear();
  // The status follows the last chunk; a further read would only add a
  // round through the reactor.
  if (!exchange_->complete()) StartRead(&response_);
}

void RecvTensorCall::OnDone(const grpc::Status& status) { exchange_->CallEnded(status); }

void RecvTensorCall::Complete(absl::Status status, Tensor tensor, bool is_dead) {
  {
    std::lock_guard lock(liveness_->mu);
    liveness_->call = nullptr;
    if (!status.ok() && !liveness_->cancelled.ok()) status = liveness_->cancelled;
  }
  std::move(detach_)(this);
  std::move(done_)(std::move(status), std::move(tensor), is_dead);
  delete this;
}

struct BlockingRecvTensorCall::Result {
  Notification done;
  absl::Status status;
  Tensor tensor;
  bool is_dead = false;
};

BlockingRecvTensorCall::BlockingRecvTensorCall(std::shared_ptr<WorkerClient> worker,
                                               DataPlane* data_plane, RecvTensorRequest request,
                                               MemoryLocation destination, absl::Duration timeout,
                                               absl::Duration peer_timeout)
    : worker_(std::move(worker)),
      request_(WithSingleMessage(std::move(request), *worker_, data_plane)),
      timeout_(timeout),
      peer_timeout_(peer_timeout),
      result_(std::make_shared<Result>()),
      exchange_(RecvExchange::Create(
          worker_, data_plane, request_, destination,
          [result = result_](absl::Status status, Tensor tensor, bool is_dead) {
            result->status = std::move(status);
            result->tensor = std::move(tensor);
            result->is_dead = is_dead;
            result->done.Notify();
          })) {}

bool BlockingRecvTensorCall::Withdrawn() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + peer_timeout_));
  WithdrawRecvTensorResponse response;
  const grpc::Status status =
      worker_->stub->WithdrawRecvTensor(&context, WithdrawalOf(request_), &response);
  return NothingWillArrive(status, response);
}

void BlockingRecvTensorCall::Abort(const absl::Status& status) {
  // Only wakes Run's thread.
  exchange_->AbortNow(status);
  // A context whose call has not started cancels it when it does.
  context_.TryCancel();
  fetch_held_context_.TryCancel();
}

bool BlockingRecvTensorCall::AwaitAnswer(grpc::CompletionQueue* queue, void* tag,
                                         absl::Time deadline) {
  if (AwaitTag(queue, tag, deadline)) return true;
  if (absl::Now() < deadline) return false;
  const bool withdrawn = Withdrawn();
  if (withdrawn) Abort(absl::DeadlineExceededError("the Recv timed out"));
  return AwaitTag(queue, tag) && !withdrawn;
}

absl::Status BlockingRecvTensorCall::Run(Tensor* tensor, bool* is_dead) {
  // Only the wait for the answer is bounded; once bytes flow, they finish.
  const absl::Time deadline = timeout_ < absl::InfiniteDuration() ? absl::Now() + timeout_
                                                                  : absl::InfiniteFuture();
  if (request_.single_message()) {
    RunOneMessage(deadline);
  } else {
    RunStream(request_, &context_, deadline);
  }
  result_->done.WaitForNotification();
  RDV_RETURN_IF_ERROR(result_->status);
  *tensor = std::move(result_->tensor);
  *is_dead = result_->is_dead;
  return absl::OkStatus();
}

void BlockingRecvTensorCall::RunOneMessage(absl::Time deadline) {
  grpc::ByteBuffer request;
  if (const absl::Status serialized = SerializeRequest(request_, &request); !serialized.ok()) {
    EndWith(*exchange_, serialized);
    return;
  }
  grpc::CompletionQueue queue;
  // Lives in the call's arena.
  grpc::ClientAsyncResponseReader<grpc::ByteBuffer>* reader =
      grpc::internal::ClientAsyncResponseReaderHelper::Create<grpc::ByteBuffer>(
          worker_->channel.get(), &queue, *worker_->recv_tensor_one_message, &context_, request);
  reader->StartCall();
  grpc::ByteBuffer answer;
  grpc::Status finished;
  reader->Finish(&answer, &finished, &answer);
  AwaitAnswer(&queue, &answer, deadline);
  DrainQueue(&queue);
  if (!finished.ok()) {
    exchange_->CallEnded(finished);
    return;
  }
  absl::Status decoded = exchange_->Consume(&answer);
  if (decoded.ok() && !exchange_->complete()) {
    decoded = absl::DataLossError(absl::StrCat(
        "worker ", worker_->worker_name, " answered a single-message RecvTensor with ",
        exchange_->received_bytes(), " of ", exchange_->payload_bytes(), " payload bytes"));
  }
  if (!decoded.ok() || !exchange_->held()) {
    if (!decoded.ok()) exchange_->Abort(decoded);
    exchange_->CallEnded(finished);
    return;
  }
  // The producer took the value for this Recv: no more timeout.
  RecvTensorRequest fetch = request_;
  fetch.set_single_message(false);
  fetch.set_fetch_held(true);
  fetch.clear_released();  // the first call delivered them
  exchange_->Refetch(fetch);
  RunStream(fetch, &fetch_held_context_, absl::InfiniteFuture());
}

void BlockingRecvTensorCall::RunStream(const RecvTensorRequest& request,
                                       grpc::ClientContext* context, absl::Time deadline) {
  grpc::ByteBuffer serialized;
  if (const absl::Status status = SerializeRequest(request, &serialized); !status.ok()) {
    EndWith(*exchange_, status);
    return;
  }
  // This thread drives its own completion queue: gRPC then reads the
  // answer on this thread instead of waking it from another, and the start
  // and the first read are in flight together.
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::ClientAsyncReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientAsyncReaderFactory<grpc::ByteBuffer>::Create(
          worker_->channel.get(), &queue, *worker_->recv_tensor, context, serialized,
          /*start=*/true, &queue));
  absl::Status decoded;
  grpc::ByteBuffer chunk;
  bool reading = true;
  // The exchange starts the side transfer the answer describes before the
  // stream's status arrives (with op tag the producer sends that status
  // only once its send is done).
  while (reading && decoded.ok() && !exchange_->complete()) {
    reader->Read(&chunk, &chunk);
    reading = AwaitAnswer(&queue, &chunk, deadline);
    if (reading) decoded = exchange_->Consume(&chunk);
    deadline = absl::InfiniteFuture();
  }
  if (!decoded.ok()) Abort(decoded);
  grpc::Status finished;
  reader->Finish(&finished, &finished);
  AwaitTag(&queue, &finished);
  DrainQueue(&queue);
  exchange_->CallEnded(finished);
}

}  // namespace rdv::control
