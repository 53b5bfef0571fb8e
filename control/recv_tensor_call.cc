#include "control/recv_tensor_call.h"

#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/protocol.h"
#include "core/cuda.h"
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

// Where the received bytes land first. In the stream: host memory, pinned
// when the tensor then goes to a GPU (the DMA copy reads it without another
// staging copy), the data plane's pool when there is one. Through the data
// plane: what it picks for the destination. By CUDA IPC: the destination
// GPU, when the request asked for it.
TensorDecoder::Allocators DecoderAllocators(DataPlane* data_plane,
                                            const RecvTensorRequest& request,
                                            MemoryLocation destination) {
  TensorDecoder::Allocators allocators;
  if (data_plane != nullptr) {
    allocators.stream = data_plane->allocator();
    allocators.transport = data_plane->ReceiveAllocator(destination);
  } else if (!destination.is_host()) {
    if (absl::StatusOr<std::shared_ptr<Allocator>> pinned = cuda::PinnedHostAllocator(); pinned.ok()) {
      allocators.stream = *std::move(pinned);
    }
  }
  if (request.consumer_accepts_cuda_ipc()) {
    absl::StatusOr<std::shared_ptr<Allocator>> device = cuda::DeviceAllocator(destination.device);
    if (device.ok()) allocators.cuda_ipc = *std::move(device);
  }
  return allocators;
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

void StreamUpload::Advance(const TensorDecoder& decoder, MemoryLocation destination) {
  if (!decided_ && decoder.has_meta()) {
    decided_ = true;
    const Tensor& tensor = decoder.tensor();
    const bool in_stream_to_gpu = !destination.is_host() && !decoder.has_transport() &&
                                  !decoder.has_cuda_ipc() && tensor.IsInitialized() &&
                                  tensor.TotalBytes() > 0 &&
                                  tensor.location().kind == MemoryKind::kPinnedHost;
    if (in_stream_to_gpu) {
      // On failure the whole copy at the end reports the error.
      absl::StatusOr<std::unique_ptr<ChunkedUpload>> upload =
          ChunkedUpload::Create(tensor, destination, kStagingChunkBytes);
      if (upload.ok()) upload_ = *std::move(upload);
    }
  }
  if (upload_ != nullptr) upload_->Advance(decoder.received_bytes());
}

void ReleaseFetched(const WorkerClient& worker, int64_t step_id, const TensorMeta& meta) {
  ReleasedTransfer transfer;
  transfer.set_step_id(step_id);
  if (meta.has_cuda_ipc()) {
    transfer.set_cuda_ipc(true);
    transfer.set_transfer_id(meta.cuda_ipc().transfer_id());
    transfer.set_length(meta.cuda_ipc().length());
  } else if (meta.has_transport() && meta.transport().op() == RDV_TRANSPORT_OP_GET) {
    transfer.set_transfer_id(meta.transport().transfer_id());
    transfer.set_length(meta.transport().length());
  } else {
    return;
  }
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
      decoder_(DecoderAllocators(data_plane, request_, destination), worker_->max_tensor_bytes) {
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

// Called under the rendezvous' lock: nothing here may finish the call.
void RecvTensorCall::Abort(const absl::Status& status) {
  {
    std::lock_guard lock(mu_);
    if (abort_status_.ok()) abort_status_ = status;
  }
  context_.TryCancel();
  // A tagged receive ends at once; a get on a live peer finishes soon, on a
  // lost one the peer watch ends it.
  CancelSideTransfer();
}

void RecvTensorCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  const absl::Status decoded = decoder_.Consume(&response_);
  if (!decoded.ok()) {
    Abort(decoded);
    return;
  }
  upload_.Advance(decoder_, destination_);
  response_.Clear();
  // The status follows the last chunk; a further read would only add a
  // round through the reactor.
  if (!decoder_.complete()) {
    StartRead(&response_);
  } else if (decoder_.has_transport() || decoder_.has_cuda_ipc()) {
    StartFetch();
  }
}

// Runs in a reaction, so before OnDone: the transfer's end cannot finish
// the call (and delete it) before this returns.
void RecvTensorCall::StartFetch() {
  {
    std::lock_guard lock(mu_);
    if (!abort_status_.ok()) return;  // the stream ends with it
  }
  {
    std::lock_guard lock(join_->mu);
    join_->transport_started = true;
  }
  std::shared_ptr<SideTransfer> side = SideTransfer::Start(
      worker_, data_plane_, decoder_, request_.rendezvous_key(),
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
  std::lock_guard lock(mu_);
  side_ = std::move(side);
  // Aborted meanwhile: its Abort found no transfer to cancel.
  if (!abort_status_.ok()) side_->Cancel();
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
  bool transfer_pending = false;
  {
    std::lock_guard lock(join_->mu);
    join_->stream_done = true;
    join_->stream_status = status;
    transfer_pending = join_->transport_started && !join_->transport_done;
    if (transfer_pending && status.ok()) {
      ExpectArrival();
      return;
    }
    join_->finished = true;
  }
  // A tagged receive would wait for a send that failed.
  if (transfer_pending) CancelSideTransfer();
  Finish();
}

void RecvTensorCall::CancelSideTransfer() {
  std::shared_ptr<SideTransfer> side;
  {
    std::lock_guard lock(mu_);
    side = side_;
  }
  if (side != nullptr) side->Cancel();
}

void RecvTensorCall::ExpectArrival() {
  std::lock_guard lock(mu_);
  if (side_ != nullptr) side_->ExpectArrivalWithin(worker_->peer_timeout);
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
  if (destination_.is_host() || !tensor->IsInitialized() || tensor->location() == destination_) {
    Complete(absl::OkStatus(), *std::move(tensor), is_dead);
    return;
  }
  auto on_device = [this](absl::StatusOr<Tensor> copied) {
    if (copied.ok()) {
      Complete(absl::OkStatus(), *std::move(copied), false);
    } else {
      Complete(copied.status(), Tensor(), false);
    }
  };
  if (std::unique_ptr<ChunkedUpload> upload = upload_.Take()) {
    upload->Finish(std::move(on_device));
  } else {
    CopyTensorAsync(*tensor, destination_, std::move(on_device));
  }
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

namespace {

// Whether the producer may answer in one message: not when the payload
// comes as a tagged send, which the consumer posts after reading the meta.
RecvTensorRequest WithSingleMessage(RecvTensorRequest request, const DataPlane* data_plane) {
  request.set_single_message(data_plane == nullptr ||
                             data_plane->transport().preferred_op() != RDV_TRANSPORT_OP_TAG);
  return request;
}

void DrainQueue(grpc::CompletionQueue* queue) {
  queue->Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (queue->Next(&ignored_tag, &ignored_ok)) {
  }
}

}  // namespace

struct BlockingRecvTensorCall::Fetched {
  Notification done;
  absl::Status status;
};

BlockingRecvTensorCall::BlockingRecvTensorCall(std::shared_ptr<WorkerClient> worker,
                                               DataPlane* data_plane, RecvTensorRequest request,
                                               MemoryLocation destination, absl::Duration timeout,
                                               absl::Duration peer_timeout)
    : worker_(std::move(worker)),
      data_plane_(data_plane),
      request_(WithSingleMessage(std::move(request), data_plane)),
      timeout_(timeout),
      peer_timeout_(peer_timeout),
      destination_(destination),
      decoder_(std::make_unique<TensorDecoder>(DecoderAllocators(data_plane, request_, destination),
                                               worker_->max_tensor_bytes)) {}

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
  std::shared_ptr<SideTransfer> side;
  {
    std::lock_guard lock(mu_);
    if (abort_status_.ok()) abort_status_ = status;
    side = side_;
  }
  // A context whose call has not started cancels it when it does.
  context_.TryCancel();
  fetch_held_context_.TryCancel();
  // Only wakes Run's thread.
  if (side != nullptr) side->End(status);
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
  auto fetched = std::make_shared<Fetched>();
  if (!request_.single_message()) {
    RDV_RETURN_IF_ERROR(ReceiveStream(request_, &context_, deadline, fetched));
    return Complete(*fetched, tensor, is_dead);
  }
  RDV_RETURN_IF_ERROR(ReceiveOneMessage(deadline));
  if (!decoder_->held()) {
    StartDescribedTransfer(fetched);
    return Complete(*fetched, tensor, is_dead);
  }
  // The producer took the value for this Recv: no more timeout.
  RecvTensorRequest fetch = request_;
  fetch.set_single_message(false);
  fetch.set_fetch_held(true);
  fetch.clear_released();  // the first call delivered them
  decoder_ = std::make_unique<TensorDecoder>(DecoderAllocators(data_plane_, fetch, destination_),
                                             worker_->max_tensor_bytes);
  RDV_RETURN_IF_ERROR(ReceiveStream(fetch, &fetch_held_context_, absl::InfiniteFuture(), fetched));
  return Complete(*fetched, tensor, is_dead);
}

absl::Status BlockingRecvTensorCall::ReceiveOneMessage(absl::Time deadline) {
  grpc::ByteBuffer request;
  RDV_RETURN_IF_ERROR(SerializeRequest(request_, &request));
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
  {
    std::lock_guard lock(mu_);
    RDV_RETURN_IF_ERROR(RecvTensorStatus(*worker_, finished, abort_status_));
  }
  RDV_RETURN_IF_ERROR(decoder_->Consume(&answer));
  if (!decoder_->complete()) {
    return absl::DataLossError(absl::StrCat("worker ", worker_->worker_name,
                                            " answered a single-message RecvTensor with ",
                                            decoder_->received_bytes(), " of ",
                                            decoder_->meta().payload_bytes(), " payload bytes"));
  }
  if (!decoder_->held()) upload_.Advance(*decoder_, destination_);
  return absl::OkStatus();
}

absl::Status BlockingRecvTensorCall::ReceiveStream(const RecvTensorRequest& request,
                                                   grpc::ClientContext* context,
                                                   absl::Time deadline,
                                                   const std::shared_ptr<Fetched>& fetched) {
  grpc::ByteBuffer serialized;
  RDV_RETURN_IF_ERROR(SerializeRequest(request, &serialized));
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
  while (reading && decoded.ok() && !decoder_->complete()) {
    reader->Read(&chunk, &chunk);
    reading = AwaitAnswer(&queue, &chunk, deadline);
    if (reading) decoded = decoder_->Consume(&chunk);
    if (reading && decoded.ok()) upload_.Advance(*decoder_, destination_);
    deadline = absl::InfiniteFuture();
  }
  // The transfer starts before the stream's status arrives (with op tag the
  // producer sends it only once its send is done).
  if (decoded.ok()) {
    StartDescribedTransfer(fetched);
  } else {
    Abort(decoded);
    fetched->done.Notify();
  }
  grpc::Status finished;
  reader->Finish(&finished, &finished);
  AwaitTag(&queue, &finished);
  DrainQueue(&queue);
  std::shared_ptr<SideTransfer> side;
  absl::Status status;
  {
    std::lock_guard lock(mu_);
    status = RecvTensorStatus(*worker_, finished, abort_status_);
    side = side_;
  }
  if (side == nullptr) return status;
  if (status.ok()) {
    side->ExpectArrivalWithin(peer_timeout_);
  } else {
    side->End(status);  // a tagged receive would wait for a send that failed
  }
  return status;
}

void BlockingRecvTensorCall::StartDescribedTransfer(const std::shared_ptr<Fetched>& fetched) {
  if (!decoder_->has_transport() && !decoder_->has_cuda_ipc()) {
    fetched->done.Notify();
    return;
  }
  std::shared_ptr<SideTransfer> side =
      SideTransfer::Start(worker_, data_plane_, *decoder_, request_.rendezvous_key(),
                          [fetched](absl::Status status) {
        fetched->status = std::move(status);
        fetched->done.Notify();
      });
  absl::Status aborted;
  {
    std::lock_guard lock(mu_);
    side_ = side;
    aborted = abort_status_;
  }
  // Aborted meanwhile: its Abort found no transfer to end.
  if (!aborted.ok()) side->End(aborted);
}

absl::Status BlockingRecvTensorCall::Complete(Fetched& fetched, Tensor* tensor, bool* is_dead) {
  fetched.done.WaitForNotification();
  RDV_RETURN_IF_ERROR(fetched.status);
  ReleaseFetched(*worker_, request_.step_id(), decoder_->meta());
  RDV_ASSIGN_OR_RETURN(*tensor, decoder_->Finish());
  *is_dead = decoder_->meta().is_dead();
  if (std::unique_ptr<ChunkedUpload> upload = upload_.Take()) {
    Notification uploaded;
    absl::StatusOr<Tensor> on_device;
    upload->Finish([&](absl::StatusOr<Tensor> copied) {
      on_device = std::move(copied);
      uploaded.Notify();
    });
    uploaded.WaitForNotification();
    RDV_ASSIGN_OR_RETURN(*tensor, std::move(on_device));
  }
  return absl::OkStatus();
}

}  // namespace rdv::control
