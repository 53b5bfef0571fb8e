// TensorService's RecvTensor calls: one reactor per remote Recv, from the
// request's arrival to the stream's end.
#include "control/tensor_service.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "control/cuda_ipc_transfer.h"
#include "control/fast_path.h"
#include "control/fast_path_wire.h"
#include "control/grpc_status.h"
#include "control/tensor_codec.h"
#include "control/tensor_route.h"
#include "core/chunked_copy.h"
#include "core/device_copy.h"
#include "core/logging.h"
#include "core/notification.h"

namespace rdv::control {

// Streams one tensor to a consumer: waits for the local Send, then writes
// the payload in chunks straight from the tensor's memory.
class TensorService::Reactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
  struct TagSend {
    std::mutex mu;
    bool write_done = false;
    bool send_done = false;
    bool finished = false;
    absl::Status status;
  };

 public:
  Reactor(TensorService* service, grpc::CallbackServerContext* context, const absl::Status& door,
          const grpc::ByteBuffer* request_buffer)
      : service_(service), context_(context) {
    if (!door.ok()) {
      Finish(ToGrpcStatus(door));
      return;
    }
    grpc::ByteBuffer copy(*request_buffer);
    RecvTensorRequest request;
    const grpc::Status parsed =
        grpc::SerializationTraits<RecvTensorRequest>::Deserialize(&copy, &request);
    if (!parsed.ok()) {
      Finish(parsed);
      return;
    }
    // Releases ride along whatever becomes of this request.
    if (const absl::Status released = service_->ReleaseTransfers(request.released());
        !released.ok()) {
      RDV_LOG(Warning) << "RecvTensor carried releases that failed: " << released;
    }
    absl::StatusOr<ParsedKey> key = ParsedKey::Parse(request.rendezvous_key());
    absl::Status admitted = key.ok() ? service_->Admit(request, *key) : key.status();
    if (!admitted.ok()) {
      Finish(ToGrpcStatus(admitted));
      return;
    }
    chunk_bytes_ = service_->env_.options.chunk_bytes;
    request_ = request;
    consumer_ = service_->WatcherFor(*key);
    key_ = *key;
    if (request.fetch_held()) {
      absl::StatusOr<HeldValue> held = service_->TakeHeldValue(
          request.step_id(), request.request_id(), request.rendezvous_key());
      if (held.ok()) {
        OnValue(absl::OkStatus(), held->value, held->is_dead);
      } else {
        Finish(ToGrpcStatus(held.status()));
      }
      return;
    }
    service_->Register(request.step_id(), request.request_id(), this);
    registered_ = true;
    RendezvousArgs args;
    args.as_sent = true;  // ChooseRoute decides how a GPU tensor leaves
    args.cancellation_manager = &cancel_;
    service_->rendezvous_mgr_.Find(request.step_id())
        ->RecvAsync(*key, args,
                    [this](const absl::Status& status, const RendezvousArgs&,
                           const RendezvousArgs&, const Tensor& value,
                           bool is_dead) { OnValue(status, value, is_dead); });
  }

  void OnCancel() override {
    cancel_.StartCancel();
    // A tagged send the consumer will never receive (it cancelled, or the
    // server is shutting down) must not hold the call open: the send ends
    // when its endpoint goes.
    if (const std::shared_ptr<TagSend> tag_send = PostedTagSend()) {
      absl::Status final_status;
      if (Settle(*tag_send, /*write_done=*/true, WentAway(), &final_status)) {
        Finish(ToGrpcStatus(final_status));
      }
    }
  }
  void OnWriteDone(bool ok) override {
    if (const std::shared_ptr<TagSend> tag_send = PostedTagSend()) {
      absl::Status final_status;
      if (Settle(*tag_send, /*write_done=*/true, ok ? absl::OkStatus() : WentAway(),
                 &final_status)) {
        Finish(ToGrpcStatus(final_status));
      }
      return;
    }
    if (!ok) {
      Finish(ToGrpcStatus(WentAway()));
      return;
    }
    WriteNext();
  }
  void OnDone() override {
    if (registered_) service_->Unregister(request_.step_id(), request_.request_id());
    // The consumer never got this call's status: its Recv failed, and the
    // value it took goes back to the step for the next Recv instead of
    // being lost (behind values sent since).
    if (taken_.has_value() && context_->IsCancelled()) {
      if (std::shared_ptr<Rendezvous> step =
              service_->rendezvous_mgr_.FindExisting(request_.step_id())) {
        step->Send(key_, {}, taken_->value, taken_->is_dead).IgnoreError();  // aborted: gone
      }
    }
    delete this;
  }

  // Withdraws the waiting Recv; true unless its value was already taken.
  // Called with the service's lock held, which keeps this reactor alive.
  bool Withdraw() {
    cancel_.StartCancel();
    // Either the waiter left now (its callback ran with CANCELLED), or a
    // Send took it first and runs the callback right after.
    settled_.WaitForNotification();
    return !delivered_;
  }

 private:
  static absl::Status WentAway() {
    return absl::CancelledError("the consumer went away mid-transfer");
  }

  // A single_message request gets one message: a payload that needs more
  // (`stream_bytes` of it in the stream, or a tagged send, which needs the
  // consumer to read the meta first) is held for a fetch_held call instead.
  bool HeldForLater(const Tensor& value, bool is_dead, size_t stream_bytes, bool tagged) {
    if (!request_.single_message() || (stream_bytes <= chunk_bytes_ && !tagged)) return false;
    service_->held_values_.Insert({request_.step_id(), request_.request_id()},
                                  {request_.rendezvous_key(), value, is_dead}, consumer_);
    taken_.reset();  // the held value is the consumer's now
    meta_ = MakeTensorMeta(value, is_dead, 0, absl::GetCurrentTimeNanos() / 1000);
    meta_.set_payload_held(true);
    chunk_ = EncodeChunk(&meta_, payload_, 0, 0);
    StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
    return true;
  }

  // Answers with a descriptor; the consumer pulls (op get), or this worker
  // sends and finishes the stream when the send is done (op tag). `op` is
  // the data plane's OpFor(value).
  void OfferThroughDataPlane(const Tensor& value, TransferOp op) {
    if (HeldForLater(value, false, 0, op == TRANSFER_OP_TAG)) return;
    meta_ = MakeTensorMeta(value, false, 0, absl::GetCurrentTimeNanos() / 1000);
    auto tag_send = std::make_shared<TagSend>();
    absl::StatusOr<TransportDescriptor> descriptor = service_->env_.data_plane->Offer(
        op, request_.step_id(), request_.request_id(), value,
        request_.consumer_transport_address(),
        consumer_, [this, tag_send](absl::Status status) {
          // `this` may be gone if the call already ended (consumer gone);
          // Settle says whether this completion is the one to finish it.
          absl::Status final_status;
          if (Settle(*tag_send, /*write_done=*/false, std::move(status), &final_status)) {
            Finish(ToGrpcStatus(final_status));
          }
        });
    if (!descriptor.ok()) {
      Finish(ToGrpcStatus(descriptor.status()));
      return;
    }
    *meta_.mutable_transport() = *descriptor;
    OfferFastPath(value, false, op == TRANSFER_OP_GET);
    chunk_ = EncodeChunk(&meta_, payload_, 0, 0);
    if (descriptor->op() != TRANSFER_OP_TAG) {
      StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    {
      std::lock_guard lock(tag_mu_);
      tag_send_ = tag_send;
    }
    StartWrite(&chunk_);
  }

  // A consumer that takes fast-path keys gets an id for this one when its
  // later values can come by the data plane (a numeric host tensor; a data
  // plane that sends, or whose transport puts): its later Recvs of the key
  // ask through the data plane's messages (control/fast_path.h). A
  // producer that sends answers by a tagged send unless told to write
  // (RDV_FAST_PATH_WRITES), or unless the value lies in memory its peers
  // read by a copy of their own: then it holds later values for the
  // consumer to read, as it offers this one (`lent`); one that is read
  // from writes, or with RDV_FAST_PATH_READS holds the value for the
  // consumer to read.
  void OfferFastPath(const Tensor& value, bool is_dead, bool lent) {
    const DataPlane* plane = service_->env_.data_plane;
    const ControlOptions& options = service_->env_.options;
    if (!request_.fast_path() || !options.fast_path || plane == nullptr ||
        !plane->carries_messages() || is_dead || !value.location().is_host() ||
        !DTypeIsMemcpyable(value.dtype()) || value.shape().rank() > kFastPathMaxDims ||
        request_.consumer_transport_address().empty()) {
      return;
    }
    const bool sends = plane->transfer_op() == TRANSFER_OP_TAG;
    const bool puts = (plane->transport().supported_ops() & RDV_TRANSPORT_OP_PUT) != 0;
    if (!sends && !puts) return;
    meta_.set_fast_path_key(service_->fast_key_ids_.Intern(
        request_.rendezvous_key(), request_.consumer_transport_address()));
    meta_.set_fast_path_address(plane->local_address());
    const FastWays ways = FastWaysFor(*plane, options, lent);
    meta_.set_fast_path_put(ways.put);
    meta_.set_fast_path_get(ways.get);
  }

  std::shared_ptr<TagSend> PostedTagSend() {
    std::lock_guard lock(tag_mu_);
    return tag_send_;
  }

  // Op tag: the stream ends once both the meta write and the send are done
  // (the consumer posts its receive when the meta arrives), or at once when
  // the consumer went away. True for the one event that must finish it.
  static bool Settle(TagSend& state, bool write_done, absl::Status status,
                     absl::Status* final_status) {
    std::lock_guard lock(state.mu);
    (write_done ? state.write_done : state.send_done) = true;
    state.status.Update(status);
    const bool consumer_gone = write_done && !status.ok();
    if (state.finished || !(consumer_gone || (state.write_done && state.send_done))) return false;
    state.finished = true;
    *final_status = state.status;
    return true;
  }

  void OnValue(const absl::Status& status, const Tensor& value, bool is_dead) {
    delivered_ = status.ok();
    if (delivered_) taken_ = Taken{value, is_dead};
    settled_.Notify();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    Take(Route(value, is_dead, /*may_lend=*/true), value, is_dead);
  }

  TensorRoute Route(const Tensor& value, bool is_dead, bool may_lend) const {
    return ChooseRoute(request_, value, is_dead, service_->env_.data_plane, may_lend);
  }

  void Take(TensorRoute route, const Tensor& value, bool is_dead) {
    // Asked once per value: the pool's lookup takes a lock.
    const TransferOp op =
        route == TensorRoute::kOffer ? service_->env_.data_plane->OpFor(value) : TRANSFER_OP_TAG;
    // A lent tensor counts once lent: lending may fail over to another route.
    if (route != TensorRoute::kLendByCudaIpc) {
      CountSent(SentPathOf(route, value, is_dead, chunk_bytes_, op), value);
    }
    switch (route) {
      case TensorRoute::kStream: return StreamHostTensor(value, is_dead);
      case TensorRoute::kStreamFromDevice: return StreamFromDevice(value);
      case TensorRoute::kOffer: return OfferThroughDataPlane(value, op);
      case TensorRoute::kStageThenOffer: return StageThenOffer(value);
      case TensorRoute::kLendByCudaIpc: return Lend(value);
    }
  }

  // Counted, and at RDV_LOG_LEVEL=debug one line per value sent.
  void CountSent(SentPath path, const Tensor& value) {
    const uint64_t bytes = value.TotalBytes();
    service_->env_.stats->Sent(path, bytes);
    RDV_LOG(Debug) << "sent '" << key_.FullKey() << "' to " << key_.dst().WorkerName() << ": "
                   << bytes << " bytes by " << SentPathName(path) << ", "
                   << absl::ToInt64Microseconds(absl::Now() - arrived_)
                   << " us after its request arrived";
  }

  // Lends a GPU tensor by CUDA IPC; when that fails, the tensor takes the
  // next route (said once per process).
  void Lend(const Tensor& value) {
    absl::StatusOr<CudaIpcDescriptor> lent =
        LendByCudaIpc(request_.step_id(), value, consumer_, &service_->cuda_ipc_lent_);
    if (!lent.ok()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        RDV_LOG(Warning) << service_->env_.worker_name << ": cannot lend a GPU tensor by CUDA IPC ("
                         << lent.status() << "); GPU tensors stage through host memory";
      }
      Take(Route(value, false, /*may_lend=*/false), value, false);
      return;
    }
    CountSent(SentPath::kCudaIpc, value);
    meta_ = MakeTensorMeta(value, false, 0, absl::GetCurrentTimeNanos() / 1000);
    *meta_.mutable_cuda_ipc() = *std::move(lent);
    chunk_ = EncodeChunk(&meta_, payload_, 0, 0);
    StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
  }

  // The consumer reads the staged copy in one go: stage it whole, into the
  // data plane's pool when that is pinned (already registered: no
  // registration per transfer).
  void StageThenOffer(const Tensor& value) {
    auto on_staged = [this](absl::StatusOr<Tensor> staged) {
      if (staged.ok()) {
        OfferThroughDataPlane(*staged, service_->env_.data_plane->OpFor(*staged));
      } else {
        Finish(ToGrpcStatus(staged.status()));
      }
    };
    const std::shared_ptr<plugin::TransportAllocator>& pool = service_->env_.data_plane->allocator();
    if (pool->Location().kind == MemoryKind::kPinnedHost) {
      CopyTensorAsync(value, pool, std::move(on_staged));
    } else {
      CopyTensorAsync(value, MemoryLocation::PinnedHost(), std::move(on_staged));
    }
  }

  // Streams a GPU tensor through pinned memory in chunks: chunk k is
  // written while chunk k+1 copies off the device.
  void StreamFromDevice(const Tensor& value) {
    if (HeldForLater(value, false, value.TotalBytes(), false)) return;
    absl::StatusOr<std::unique_ptr<ChunkedDownload>> download =
        ChunkedDownload::Start(value, chunk_bytes_);
    absl::StatusOr<TensorPayload> payload =
        download.ok() ? TensorPayload::Of((*download)->host()) : download.status();
    if (!payload.ok()) {
      Finish(ToGrpcStatus(payload.status()));
      return;
    }
    download_ = *std::move(download);
    payload_ = *std::move(payload);
    meta_ = MakeTensorMeta(value, false, payload_.size(), absl::GetCurrentTimeNanos() / 1000);
    WriteNext();
  }

  void StreamHostTensor(const Tensor& value, bool is_dead) {
    absl::StatusOr<TensorPayload> payload = TensorPayload::Of(value);
    if (!payload.ok()) {
      Finish(ToGrpcStatus(payload.status()));
      return;
    }
    if (HeldForLater(value, is_dead, payload->size(), false)) return;
    payload_ = *std::move(payload);
    meta_ = MakeTensorMeta(value, is_dead, payload_.size(), absl::GetCurrentTimeNanos() / 1000);
    // Streamed, so not lent: the key's later values go as the plane sends.
    OfferFastPath(value, is_dead, /*lent=*/false);
    WriteNext();
  }

  // One chunk per write; the last goes with the status. A chunk still on
  // its way off the GPU is written when it lands.
  void WriteNext() {
    const size_t length = std::min(chunk_bytes_, payload_.size() - offset_);
    if (download_ != nullptr) {
      const absl::StatusOr<bool> landed =
          download_->WhenReady(offset_ + length, [this] { WriteNext(); });
      if (!landed.ok()) {
        Finish(ToGrpcStatus(landed.status()));
        return;
      }
      if (!*landed) return;
    }
    chunk_ = EncodeChunk(offset_ == 0 ? &meta_ : nullptr, payload_, offset_, length);
    offset_ += length;
    if (offset_ == payload_.size()) {
      StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&chunk_);
    }
  }

  // The value this call took from the step, until the consumer has it.
  struct Taken {
    Tensor value;
    bool is_dead = false;
  };

  TensorService* const service_;
  grpc::CallbackServerContext* const context_;
  CancellationManager cancel_;
  ParsedKey key_;
  const absl::Time arrived_ = absl::Now();
  std::optional<Taken> taken_;
  RecvTensorRequest request_;
  ConsumerWatcher consumer_;  // what is held for the consumer goes if it is lost
  bool registered_ = false;
  Notification settled_;  // the local Recv completed, one way or the other
  bool delivered_ = false;  // ... with a value; written before settled_
  std::mutex tag_mu_;  // OnCancel may come on any thread
  std::shared_ptr<TagSend> tag_send_;  // tag_mu_: set once the send is posted
  std::unique_ptr<ChunkedDownload> download_;  // a GPU tensor streamed in chunks
  size_t chunk_bytes_ = 0;
  TensorPayload payload_;
  TensorMeta meta_;
  size_t offset_ = 0;
  grpc::ByteBuffer chunk_;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* TensorService::RecvTensor(
    grpc::CallbackServerContext* context, const absl::Status& door,
    const grpc::ByteBuffer* request) {
  return new Reactor(this, context, door, request);
}

bool TensorService::Withdraw(int64_t step_id, int64_t request_id) {
  std::lock_guard lock(mu_);
  auto it = live_recvs_.find({step_id, request_id});
  if (it != live_recvs_.end()) return it->second->Withdraw();
  // Not here yet, or over: one that arrives after its withdrawal is
  // refused, or it would take a value its consumer no longer waits for.
  seen_requests_[step_id].insert(request_id);
  return true;
}

}  // namespace rdv::control
