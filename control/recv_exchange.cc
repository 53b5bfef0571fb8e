#include "control/recv_exchange.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "control/fast_path_wire.h"
#include "control/grpc_status.h"
#include "control/landing_allocator.h"
#include "core/cuda.h"
#include "core/device_copy.h"

namespace rdv::control {
namespace {

// Where the received bytes land first. In the stream: host memory, pinned
// when the tensor then goes to a GPU (the DMA copy reads it without another
// staging copy), the data plane's pool when there is one. Through the data
// plane: what it picks for the destination. By CUDA IPC: the destination
// GPU, when the request asked for it. A host Recv's landing buffer for a
// tagged send, which may land anywhere. (Not for the stream: decoding
// gRPC's chunks into it measured slower than into rdv's own memory and a
// copy, docs/torch.md.)
TensorDecoder::Allocators DecoderAllocators(DataPlane* data_plane,
                                            const RecvTensorRequest& request,
                                            MemoryLocation destination,
                                            const std::shared_ptr<Buffer>& landing) {
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
  if (landing != nullptr && destination.is_host() && data_plane != nullptr &&
      data_plane->transfer_op() == TRANSFER_OP_TAG) {
    allocators.transport = std::make_shared<LandingAllocator>(landing, allocators.transport);
  }
  return allocators;
}

// Lets the producer free the buffer a finished get or CUDA IPC copy read
// from.
void ReleaseFetched(const WorkerClient& worker, int64_t step_id, const TensorMeta& meta) {
  ReleasedTransfer transfer;
  transfer.set_step_id(step_id);
  if (meta.has_cuda_ipc()) {
    transfer.set_cuda_ipc(true);
    transfer.set_transfer_id(meta.cuda_ipc().transfer_id());
    transfer.set_length(meta.cuda_ipc().length());
  } else if (meta.has_transport() && meta.transport().op() == TRANSFER_OP_GET) {
    transfer.set_transfer_id(meta.transport().transfer_id());
    transfer.set_length(meta.transport().length());
  } else {
    return;
  }
  worker.releases->Release(transfer);
}

// The abort status if the call was aborted, UNAVAILABLE naming the worker
// if it could not be reached, else the call's own.
absl::Status CallStatus(const WorkerClient& worker, const grpc::Status& status,
                        const absl::Status& abort_status) {
  if (!abort_status.ok()) return abort_status;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat("worker ", worker.worker_name, " at ",
                                               worker.address,
                                               " is unreachable or died: ", status.error_message()));
  }
  return FromGrpcStatus(status);
}

}  // namespace

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

std::shared_ptr<RecvExchange> RecvExchange::Create(std::shared_ptr<WorkerClient> worker,
                                                   DataPlane* data_plane,
                                                   const RecvTensorRequest& request,
                                                   MemoryLocation destination, Done done,
                                                   std::shared_ptr<Buffer> landing) {
  return std::shared_ptr<RecvExchange>(new RecvExchange(
      std::move(worker), data_plane, request, destination, std::move(done), std::move(landing)));
}

RecvExchange::RecvExchange(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                           const RecvTensorRequest& request, MemoryLocation destination,
                           Done done, std::shared_ptr<Buffer> landing)
    : worker_(std::move(worker)),
      data_plane_(data_plane),
      key_(request.rendezvous_key()),
      step_id_(request.step_id()),
      destination_(destination),
      landing_(std::move(landing)),
      done_(std::move(done)),
      decoder_(MakeDecoder(request)) {}

std::unique_ptr<TensorDecoder> RecvExchange::MakeDecoder(const RecvTensorRequest& request) const {
  return std::make_unique<TensorDecoder>(
      DecoderAllocators(data_plane_, request, destination_, landing_), worker_->max_tensor_bytes);
}

absl::Status RecvExchange::Consume(grpc::ByteBuffer* message) {
  RDV_RETURN_IF_ERROR(decoder_->Consume(message));
  upload_.Advance(*decoder_, destination_);
  if (decoder_->complete() && (decoder_->has_transport() || decoder_->has_cuda_ipc())) {
    StartSideTransfer();
  }
  return absl::OkStatus();
}

void RecvExchange::Refetch(const RecvTensorRequest& fetch) {
  decoder_ = MakeDecoder(fetch);
  upload_ = StreamUpload();
}

void RecvExchange::StartSideTransfer() {
  {
    std::lock_guard lock(mu_);
    // Aborted: the call ends with it, and nothing is left to wait for.
    if (side_started_ || !abort_status_.ok()) return;
    side_started_ = true;
  }
  std::shared_ptr<SideTransfer> side = SideTransfer::Start(
      worker_, data_plane_, *decoder_, key_, [weak = weak_from_this()](absl::Status status) {
        if (std::shared_ptr<RecvExchange> self = weak.lock()) {
          self->SideTransferEnded(std::move(status));
        }
      });
  absl::Status aborted;
  bool end_now = false;
  {
    std::lock_guard lock(mu_);
    side_ = side;
    aborted = abort_status_;
    end_now = end_side_now_;
  }
  // Aborted meanwhile: that abort found no transfer to end.
  if (!aborted.ok()) EndForAbort(*side, aborted, end_now);
}

void RecvExchange::EndForAbort(SideTransfer& side, const absl::Status& status, bool end_now) {
  if (end_now) {
    side.End(status);
  } else {
    // A tagged receive ends at once; a get on a live peer finishes soon, on
    // a lost one the peer watch ends it.
    side.Cancel();
  }
}

void RecvExchange::Abort(const absl::Status& status) { Abort(status, /*end_now=*/false); }

void RecvExchange::AbortNow(const absl::Status& status) { Abort(status, /*end_now=*/true); }

void RecvExchange::Abort(const absl::Status& status, bool end_now) {
  std::shared_ptr<SideTransfer> side;
  absl::Status first;
  {
    std::lock_guard lock(mu_);
    if (abort_status_.ok()) abort_status_ = status;
    end_side_now_ = end_side_now_ || end_now;
    first = abort_status_;
    side = side_;
  }
  if (side != nullptr) EndForAbort(*side, first, end_now);
}

void RecvExchange::SideTransferEnded(absl::Status status) {
  {
    std::lock_guard lock(mu_);
    side_ended_ = true;
    side_status_ = std::move(status);
    // The call's end finishes the exchange, or has (a failed call does not
    // wait for the transfer).
    if (!call_ended_ || finished_) return;
    finished_ = true;
    status = side_status_;
  }
  Finish(std::move(status));
}

void RecvExchange::CallEnded(const grpc::Status& grpc_status) {
  // `done` may drop the driver's reference.
  const std::shared_ptr<RecvExchange> self = shared_from_this();
  absl::Status status;
  std::shared_ptr<SideTransfer> pending;
  absl::Duration peer_timeout;
  {
    std::lock_guard lock(mu_);
    // Read before call_ended_ lets the transfer's end finish (and take
    // worker_).
    peer_timeout = worker_->peer_timeout;
    call_ended_ = true;
    status = CallStatus(*worker_, grpc_status, abort_status_);
    if (side_started_ && !side_ended_) pending = side_;
    if (status.ok() && side_started_ && pending == nullptr) status = side_status_;
    finished_ = !status.ok() || pending == nullptr;
  }
  if (!status.ok() && pending != nullptr) {
    pending->Cancel();  // a tagged receive would wait for a send that failed
  } else if (pending != nullptr) {
    // The producer's part is done; the bytes are on their way.
    pending->ExpectArrivalWithin(peer_timeout);
    return;
  }
  Finish(std::move(status));
}

void RecvExchange::Finish(absl::Status status) {
  // Let go of the worker before `done`: a driver that ends its count of
  // calls in `done` (RecvTensorCall) lets the worker cache drop its own
  // reference, and the last one must not go here, on gRPC's thread, where
  // destroying the channel frees what its own threads still use.
  std::shared_ptr<WorkerClient> worker = std::move(worker_);
  if (!status.ok()) {
    worker.reset();
    std::move(done_)(std::move(status), Tensor(), false);
    return;
  }
  ReleaseFetched(*worker, step_id_, decoder_->meta());
  absl::StatusOr<Tensor> tensor = decoder_->Finish();
  if (!tensor.ok()) {
    worker.reset();
    std::move(done_)(tensor.status(), Tensor(), false);
    return;
  }
  LearnFastKey(*worker, *tensor);
  worker.reset();
  MoveToDestination(*std::move(tensor), decoder_->meta().is_dead());
}

void RecvExchange::LearnFastKey(WorkerClient& worker, const Tensor& tensor) const {
  const TensorMeta& meta = decoder_->meta();
  if (meta.is_dead()) return;
  // A value the producer gave no id for (a string, a value it holds on a
  // GPU) or of more dimensions than a request carries could not have come
  // fast: its key keeps to RecvTensor until one that can, rather than
  // asking fast each time only to be told to take RecvTensor.
  if (meta.fast_path_key() == 0 || tensor.shape().rank() > kFastPathMaxDims) {
    return worker.fast_keys.Forget(key_);
  }
  worker.fast_keys.Learn(key_, KnownFastKey{meta.fast_path_key(), tensor.dtype(), tensor.shape(),
                                            std::make_shared<const std::string>(
                                                meta.fast_path_address()),
                                            meta.fast_path_put(),
                                            meta.fast_path_get()});
}

bool NeedsCopyTo(MemoryLocation destination, const Tensor& tensor, bool is_dead) {
  return !is_dead && !destination.is_host() && tensor.IsInitialized() &&
         tensor.location() != destination;
}

CopyTensorDone EndWhenCopied(absl::AnyInvocable<void(absl::Status, Tensor, bool) &&> done) {
  return [done = std::move(done)](absl::StatusOr<Tensor> copied) mutable {
    if (copied.ok()) {
      std::move(done)(absl::OkStatus(), *std::move(copied), false);
    } else {
      std::move(done)(copied.status(), Tensor(), false);
    }
  };
}

void RecvExchange::MoveToDestination(Tensor tensor, bool is_dead) {
  if (!NeedsCopyTo(destination_, tensor, is_dead)) {
    std::move(done_)(absl::OkStatus(), std::move(tensor), is_dead);
    return;
  }
  if (std::unique_ptr<ChunkedUpload> upload = upload_.Take()) {
    upload->Finish(EndWhenCopied(std::move(done_)));
  } else {
    CopyTensorAsync(tensor, destination_, EndWhenCopied(std::move(done_)));
  }
}

}  // namespace rdv::control
