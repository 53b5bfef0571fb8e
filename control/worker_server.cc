#include "control/worker_server.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <tuple>
#include <vector>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_callback.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "control/consumer_lease.h"
#include "control/cuda_ipc_transfer.h"
#include "control/grpc_status.h"
#include "control/leased_table.h"
#include "control/named_tensor.h"
#include "control/protocol.h"
#include "control/rpc_remote_rendezvous.h"
#include "control/security.h"
#include "control/tensor_codec.h"
#include "control/tensor_pattern.h"
#include "core/chunked_copy.h"
#include "core/cuda_settings.h"
#include "core/device_copy.h"
#include "core/logging.h"
#include "core/notification.h"
#include "graph/executor.h"

namespace rdv::control {
namespace {

using WorkerServiceBase = WorkerService::WithCallbackMethod_Handshake<
    WorkerService::WithRawCallbackMethod_RecvTensor<
        WorkerService::WithCallbackMethod_ReleaseTransfers<
            WorkerService::WithCallbackMethod_CleanupStep<
                WorkerService::WithCallbackMethod_AbortStep<
                    WorkerService::WithCallbackMethod_WithdrawRecvTensor<
                        WorkerService::WithCallbackMethod_RegisterGraph<
                            WorkerService::WithCallbackMethod_RunGraph<
                                WorkerService::WithCallbackMethod_CleanupGraph<
                                    WorkerService::Service>>>>>>>>>;

uint64_t NewIncarnation() {
  std::random_device random;
  uint64_t value = 0;
  while (value == 0) value = uint64_t{random()} << 32 | random();
  return value;
}

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

class WorkerServer::Impl {
 public:
  explicit Impl(WorkerServerOptions options)
      : options_(std::move(options)),
        worker_cache_(options_.cluster, options_.control),
        rendezvous_mgr_([this](int64_t step_id) {
          return std::make_shared<RpcRemoteRendezvous>(&env_, step_id);
        }),
        worker_service_(this),
        driver_service_(this) {
    env_.worker_name = ClusterSpec::WorkerName(options_.job, options_.task);
    env_.worker = *DeviceName::Parse(env_.worker_name);
    env_.incarnation = NewIncarnation();
    env_.options = options_.control;
    env_.worker_cache = &worker_cache_;
    env_.protocol = options_.protocol;
  }

  absl::Status Start();
  void Shutdown();

  // Producer side of RecvTensor: checks that this worker is the key's source
  // and that the request is new.
  absl::Status AdmitRecvTensor(const RecvTensorRequest& request, const ParsedKey& key);
  // The value held for a fetch_held call, once; NOT_FOUND when there is
  // none (already fetched, its step cleaned up, or its consumer lost).
  // A value taken for a single_message RecvTensor whose answer needs a
  // stream, kept under its step and request id for the fetch_held call.
  struct HeldValue {
    Tensor value;
    bool is_dead = false;
  };
  absl::StatusOr<HeldValue> TakeHeldValue(int64_t step_id, int64_t request_id);
  // Watches the consumer `key` names for what is held for it.
  ConsumerWatcher WatcherFor(const ParsedKey& key) {
    return ConsumerWatcher(worker_cache_, env_.worker_name, key);
  }
  absl::Status Produce(const ProduceRequest& request);
  absl::Status ReleaseTransfers(
      const google::protobuf::RepeatedPtrField<ReleasedTransfer>& transfers);
  // True when the RecvTensor `request_id` of `step_id` was still waiting and
  // is now withdrawn (or never arrived, or already ended without a value).
  bool Withdraw(int64_t step_id, int64_t request_id);
  const std::string& Bytes(uint64_t size);
  void AbortStep(const AbortStepRequest& request);
  void CleanupStep(int64_t step_id);
  absl::StatusOr<std::string> RegisterGraph(const RegisterGraphRequest& request);
  // Runs the partition for the step; `done` runs once it has (on the
  // thread that finishes it). A failure aborts the step on every worker.
  void RunGraph(const RunGraphRequest& request, RunGraphResponse* response,
                absl::AnyInvocable<void(absl::Status) &&> done);
  absl::Status CleanupGraph(const std::string& handle);

  WorkerServerOptions options_;
  WorkerEnv env_;
  std::unique_ptr<DataPlane> data_plane_;
  // GPU tensors lent to consumers on this host (control/cuda_ipc_transfer.h).
  HeldTransfers cuda_ipc_lent_;
  // Values taken for single_message RecvTensors whose answer needs a stream.
  LeasedTable<std::pair<int64_t, int64_t>, HeldValue> held_values_;
  WorkerCache worker_cache_;
  RendezvousMgr rendezvous_mgr_;
  std::string address_;

 private:
  // A RunGraph whose client went away (or that a shutting-down server
  // cancels) aborts its step, so that the run ends instead of waiting.
  class RunGraphReactor final : public grpc::ServerUnaryReactor {
   public:
    explicit RunGraphReactor(std::shared_ptr<Rendezvous> rendezvous)
        : rendezvous_(std::move(rendezvous)) {}
    void OnCancel() override {
      rendezvous_->StartAbort(absl::CancelledError("RunGraph was cancelled"));
    }
    void OnDone() override { delete this; }

   private:
    const std::shared_ptr<Rendezvous> rendezvous_;
  };

  class WorkerServiceImpl final : public WorkerServiceBase {
   public:
    explicit WorkerServiceImpl(Impl* impl) : impl_(impl) {}
    grpc::ServerUnaryReactor* Handshake(grpc::CallbackServerContext* context,
                                        const HandshakeRequest* request,
                                        HandshakeResponse* response) override;
    grpc::ServerWriteReactor<grpc::ByteBuffer>* RecvTensor(
        grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
    grpc::ServerUnaryReactor* ReleaseTransfers(grpc::CallbackServerContext* context,
                                               const ReleaseTransfersRequest* request,
                                               ReleaseTransfersResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      return Reply(context, impl_->ReleaseTransfers(request->transfers()));
    }
    grpc::ServerUnaryReactor* CleanupStep(grpc::CallbackServerContext* context,
                                          const CleanupStepRequest* request,
                                          CleanupStepResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      impl_->CleanupStep(request->step_id());
      return Reply(context, absl::OkStatus());
    }
    grpc::ServerUnaryReactor* WithdrawRecvTensor(grpc::CallbackServerContext* context,
                                                 const WithdrawRecvTensorRequest* request,
                                                 WithdrawRecvTensorResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      response->set_withdrawn(impl_->Withdraw(request->step_id(), request->request_id()));
      return Reply(context, absl::OkStatus());
    }
    grpc::ServerUnaryReactor* AbortStep(grpc::CallbackServerContext* context,
                                        const AbortStepRequest* request,
                                        AbortStepResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      impl_->AbortStep(*request);
      return Reply(context, absl::OkStatus());
    }
    grpc::ServerUnaryReactor* RegisterGraph(grpc::CallbackServerContext* context,
                                            const RegisterGraphRequest* request,
                                            RegisterGraphResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      absl::StatusOr<std::string> handle = impl_->RegisterGraph(*request);
      if (handle.ok()) response->set_graph_handle(*handle);
      return Reply(context, handle.status());
    }
    grpc::ServerUnaryReactor* RunGraph(grpc::CallbackServerContext* context,
                                       const RunGraphRequest* request,
                                       RunGraphResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      auto* reactor = new RunGraphReactor(impl_->rendezvous_mgr_.Find(request->step_id()));
      impl_->RunGraph(*request, response, [reactor](absl::Status status) {
        reactor->Finish(ToGrpcStatus(status));
      });
      return reactor;
    }
    grpc::ServerUnaryReactor* CleanupGraph(grpc::CallbackServerContext* context,
                                           const CleanupGraphRequest* request,
                                           CleanupGraphResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      return Reply(context, impl_->CleanupGraph(request->graph_handle()));
    }

   private:
    absl::Status Admit(grpc::CallbackServerContext* context) const {
      return AdmitCaller(*context, impl_->env_.options.security);
    }

    Impl* const impl_;
  };

  class DriverServiceImpl final : public DriverService::CallbackService {
   public:
    explicit DriverServiceImpl(Impl* impl) : impl_(impl) {}
    grpc::ServerUnaryReactor* Produce(grpc::CallbackServerContext* context,
                                      const ProduceRequest* request, ProduceResponse*) override {
      if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      return Reply(context, impl_->Produce(*request));
    }
    grpc::ServerUnaryReactor* FetchBytes(grpc::CallbackServerContext* context,
                                         const FetchBytesRequest* request,
                                         FetchBytesResponse* response) override {
      if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      if (request->size() > kMaxGrpcChunkBytes) {
        return Reply(context, absl::InvalidArgumentError(absl::StrCat(
                                  "FetchBytes of ", request->size(), " bytes; the most is ",
                                  kMaxGrpcChunkBytes)));
      }
      response->set_payload(impl_->Bytes(request->size()));
      return Reply(context, absl::OkStatus());
    }
    grpc::ServerUnaryReactor* Holdings(grpc::CallbackServerContext* context,
                                       const HoldingsRequest*,
                                       HoldingsResponse* response) override {
      if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
      if (const DataPlane* plane = impl_->data_plane_.get()) {
        response->set_transfers(plane->transfers_held());
        response->set_sends(plane->sends_in_flight());
      }
      response->set_values(impl_->held_values_.size());
      response->set_cuda_ipc_lent(impl_->cuda_ipc_lent_.size());
      for (const std::shared_ptr<WorkerClient>& worker : impl_->worker_cache_.Clients()) {
        if (worker->watch->WatchingReached()) {
          response->set_watched_workers_reached(response->watched_workers_reached() + 1);
        }
      }
      return Reply(context, absl::OkStatus());
    }

   private:
    absl::Status Admit(grpc::CallbackServerContext* context) const {
      return AdmitCaller(*context, impl_->env_.options.security);
    }

    Impl* const impl_;
  };

  class RecvTensorReactor;


  WorkerServiceImpl worker_service_;
  DriverServiceImpl driver_service_;
  std::unique_ptr<grpc::Server> server_;

  std::mutex mu_;
  std::condition_variable forwards_done_;
  // RecvTensor calls in progress, by (step, request id), for Withdraw.
  absl::flat_hash_map<std::pair<int64_t, int64_t>, RecvTensorReactor*> live_recvs_;  // mu_
  int forwards_in_flight_ = 0;  // AbortStep forwards not yet answered; mu_
  // Request ids seen per step, so that a repeated RecvTensor is refused.
  absl::flat_hash_map<int64_t, absl::flat_hash_set<int64_t>> seen_requests_;  // guarded by mu_
  // Driver tensors, made once per (dtype, dims, seed, memory location) and
  // sent many times.
  std::map<std::tuple<int, std::vector<int64_t>, uint32_t, std::string>, Tensor>
      pattern_tensors_;  // mu_
  std::map<uint64_t, std::string> byte_payloads_;  // guarded by mu_
  // Registered partitions; a run holds its executor until it ends.
  std::map<std::string, std::shared_ptr<const graph::Executor>> graphs_;  // mu_
  int64_t graphs_registered_ = 0;  // mu_
};

// Streams one tensor to a consumer: waits for the local Send, then writes
// the payload in chunks straight from the tensor's memory.
class WorkerServer::Impl::RecvTensorReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
  struct TagSend {
    std::mutex mu;
    bool write_done = false;
    bool send_done = false;
    bool finished = false;
    absl::Status status;
  };

 public:
  // `door`: whether the caller passed the door (AdmitCaller).
  RecvTensorReactor(Impl* impl, const absl::Status& door, const grpc::ByteBuffer* request_buffer)
      : impl_(impl) {
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
    if (const absl::Status released = impl_->ReleaseTransfers(request.released());
        !released.ok()) {
      RDV_LOG(Warning) << "RecvTensor carried releases that failed: " << released;
    }
    absl::StatusOr<ParsedKey> key = ParsedKey::Parse(request.rendezvous_key());
    absl::Status admitted = key.ok() ? impl_->AdmitRecvTensor(request, *key) : key.status();
    if (!admitted.ok()) {
      Finish(ToGrpcStatus(admitted));
      return;
    }
    chunk_bytes_ = impl_->env_.options.chunk_bytes;
    request_ = request;
    consumer_ = impl_->WatcherFor(*key);
    if (request.fetch_held()) {
      absl::StatusOr<HeldValue> held =
          impl_->TakeHeldValue(request.step_id(), request.request_id());
      if (held.ok()) {
        OnValue(absl::OkStatus(), held->value, held->is_dead);
      } else {
        Finish(ToGrpcStatus(held.status()));
      }
      return;
    }
    {
      std::lock_guard lock(impl_->mu_);
      impl_->live_recvs_[{request.step_id(), request.request_id()}] = this;
      registered_ = true;
    }
    RendezvousArgs args;
    args.as_sent = true;  // SendDeviceTensor decides how a GPU tensor leaves
    args.cancellation_manager = &cancel_;
    impl_->rendezvous_mgr_.Find(request.step_id())
        ->RecvAsync(*key, args,
                    [this](const absl::Status& status, const RendezvousArgs&,
                           const RendezvousArgs&, const Tensor& value,
                           bool is_dead) { OnValue(status, value, is_dead); });
  }

  void OnCancel() override { cancel_.StartCancel(); }
  void OnWriteDone(bool ok) override {
    if (tag_send_ != nullptr) {
      absl::Status final_status;
      if (Settle(*tag_send_, /*write_done=*/true, ok ? absl::OkStatus() : WentAway(),
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
    if (registered_) {
      std::lock_guard lock(impl_->mu_);
      impl_->live_recvs_.erase({request_.step_id(), request_.request_id()});
    }
    delete this;
  }

  // Withdraws the waiting Recv; true unless its value was already taken.
  // Called with impl_->mu_ held, which keeps this reactor alive.
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

  // Whether the payload moves through the data plane instead of the stream.
  bool UseDataPlane(const Tensor& value, bool is_dead) const {
    const DataPlane* plane = impl_->data_plane_.get();
    return plane != nullptr && request_.protocol() == plane->protocol() && !is_dead &&
           value.IsInitialized() && DTypeIsMemcpyable(value.dtype()) &&
           value.TotalBytes() > plane->options().inline_bytes;
  }

  // A single_message request gets one message: a payload that needs more
  // (`stream_bytes` of it in the stream, or a tagged send, which needs the
  // consumer to read the meta first) is held for a fetch_held call instead.
  bool HeldForLater(const Tensor& value, bool is_dead, size_t stream_bytes, bool tagged) {
    if (!request_.single_message() || (stream_bytes <= chunk_bytes_ && !tagged)) return false;
    impl_->held_values_.Insert({request_.step_id(), request_.request_id()}, {value, is_dead},
                               consumer_);
    meta_ = MakeTensorMeta(value, is_dead, 0, absl::GetCurrentTimeNanos() / 1000);
    meta_.set_payload_held(true);
    chunk_ = EncodeChunk(&meta_, payload_, 0, 0);
    StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
    return true;
  }

  // Answers with a descriptor; the consumer pulls (op get), or this worker
  // sends and finishes the stream when the send is done (op tag).
  void OfferThroughDataPlane(const Tensor& value) {
    if (HeldForLater(value, false, 0,
                     impl_->data_plane_->transport().preferred_op() == RDV_TRANSPORT_OP_TAG)) {
      return;
    }
    meta_ = MakeTensorMeta(value, false, 0, absl::GetCurrentTimeNanos() / 1000);
    auto tag_send = std::make_shared<TagSend>();
    absl::StatusOr<TransportDescriptor> descriptor = impl_->data_plane_->Offer(
        request_.step_id(), request_.request_id(), value, request_.consumer_transport_address(),
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
    chunk_ = EncodeChunk(&meta_, payload_, 0, 0);
    if (descriptor->op() != RDV_TRANSPORT_OP_TAG) {
      StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    tag_send_ = tag_send;
    StartWrite(&chunk_);
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
    settled_.Notify();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
    } else if (!is_dead && value.IsInitialized() && !value.location().is_host()) {
      SendDeviceTensor(value);
    } else {
      SendHostTensor(value, is_dead);
    }
  }

  // Lends a GPU tensor by CUDA IPC to a consumer on this host that asked
  // for it; else offers it in place through a data plane that moves GPU
  // memory; else copies it to pinned host memory and sends that.
  void SendDeviceTensor(const Tensor& value) {
    if (CudaIpcWanted(request_, value)) {
      absl::StatusOr<CudaIpcDescriptor> lent =
          LendByCudaIpc(request_.step_id(), value, consumer_, &impl_->cuda_ipc_lent_);
      if (lent.ok()) {
        meta_ = MakeTensorMeta(value, false, 0, absl::GetCurrentTimeNanos() / 1000);
        *meta_.mutable_cuda_ipc() = *std::move(lent);
        chunk_ = EncodeChunk(&meta_, payload_, 0, 0);
        StartWriteAndFinish(&chunk_, grpc::WriteOptions(), grpc::Status::OK);
        return;
      }
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        RDV_LOG(Warning) << impl_->env_.worker_name << ": cannot lend a GPU tensor by CUDA IPC ("
                         << lent.status() << "); GPU tensors stage through host memory";
      }
    }
    if (!UseDataPlane(value, false)) {
      StreamFromDevice(value);
      return;
    }
    if (impl_->data_plane_->MovesCudaMemory()) {
      OfferThroughDataPlane(value);
      return;
    }
    // The consumer reads the staged copy in one go: stage it whole, into
    // the data plane's pool when that is pinned (already registered: no
    // registration per transfer).
    auto on_staged = [this](absl::StatusOr<Tensor> staged) {
      if (staged.ok()) {
        SendHostTensor(*staged, false);
      } else {
        Finish(ToGrpcStatus(staged.status()));
      }
    };
    const std::shared_ptr<plugin::TransportAllocator>& pool = impl_->data_plane_->allocator();
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

  void SendHostTensor(const Tensor& value, bool is_dead) {
    if (UseDataPlane(value, is_dead)) {
      OfferThroughDataPlane(value);
      return;
    }
    absl::StatusOr<TensorPayload> payload = TensorPayload::Of(value);
    if (!payload.ok()) {
      Finish(ToGrpcStatus(payload.status()));
      return;
    }
    if (HeldForLater(value, is_dead, payload->size(), false)) return;
    payload_ = *std::move(payload);
    meta_ = MakeTensorMeta(value, is_dead, payload_.size(), absl::GetCurrentTimeNanos() / 1000);
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

  Impl* const impl_;
  CancellationManager cancel_;
  RecvTensorRequest request_;
  ConsumerWatcher consumer_;  // what is held for the consumer goes if it is lost
  bool registered_ = false;
  Notification settled_;  // the local Recv completed, one way or the other
  bool delivered_ = false;  // ... with a value; written before settled_
  std::shared_ptr<TagSend> tag_send_;
  std::unique_ptr<ChunkedDownload> download_;  // a GPU tensor streamed in chunks
  size_t chunk_bytes_ = 0;
  TensorPayload payload_;
  TensorMeta meta_;
  size_t offset_ = 0;
  grpc::ByteBuffer chunk_;
};

grpc::ServerUnaryReactor* WorkerServer::Impl::WorkerServiceImpl::Handshake(
    grpc::CallbackServerContext* context, const HandshakeRequest* request,
    HandshakeResponse* response) {
  if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
  if (request->protocol_version() != kProtocolVersion) {
    return Reply(context, absl::FailedPreconditionError(absl::StrCat(
                              "worker ", request->worker_name(), " speaks protocol version ",
                              request->protocol_version(), "; ", impl_->env_.worker_name,
                              " speaks ", kProtocolVersion)));
  }
  response->set_worker_name(impl_->env_.worker_name);
  response->set_incarnation(impl_->env_.incarnation);
  response->set_protocol_version(kProtocolVersion);
  return Reply(context, absl::OkStatus());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerServer::Impl::WorkerServiceImpl::RecvTensor(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new RecvTensorReactor(impl_, Admit(context), request);
}

absl::Status WorkerServer::Impl::AdmitRecvTensor(const RecvTensorRequest& request,
                                                 const ParsedKey& key) {
  if (request.protocol() != kProtocolGrpc && request.protocol() != env_.protocol) {
    return absl::FailedPreconditionError(
        absl::StrCat("RecvTensor with protocol '", Excerpt(request.protocol(), 64), "': worker ",
                     env_.worker_name, " serves ", env_.protocol,
                     " (start every worker with the same --protocol)"));
  }
  if (!InSameAddressSpace(key.src(), env_.worker)) {
    return absl::InvalidArgumentError(absl::StrCat("RecvTensor of '", Excerpt(key.FullKey()),
                                                   "' sent to ", env_.worker_name,
                                                   ", but its source device is not on it"));
  }
  if (key.src_incarnation() != env_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "RecvTensor of '", Excerpt(key.FullKey()), "': worker ", env_.worker_name,
        " has incarnation ", FormatIncarnation(env_.incarnation),
        ", the key names ", FormatIncarnation(key.src_incarnation()),
        "; the worker job was probably restarted"));
  }
  if (request.fetch_held()) return absl::OkStatus();  // served once: TakeHeldValue
  std::lock_guard lock(mu_);
  if (!seen_requests_[request.step_id()].insert(request.request_id()).second) {
    return absl::AlreadyExistsError(absl::StrCat("RecvTensor request ", request.request_id(),
                                                 " of step ", request.step_id(),
                                                 " was already received; it is never served twice"));
  }
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::Produce(const ProduceRequest& request) {
  std::shared_ptr<Rendezvous> rendezvous = rendezvous_mgr_.Find(request.step_id());
  for (const ProduceItem& item : request.items()) {
    RDV_ASSIGN_OR_RETURN(const ParsedKey key, ParsedKey::Parse(item.rendezvous_key()));
    Tensor tensor;
    if (!item.is_dead()) {
      RDV_ASSIGN_OR_RETURN(const DType dtype, DTypeFromEnumValue(item.dtype()));
      const std::vector<int64_t> dims(item.dims().begin(), item.dims().end());
      RDV_ASSIGN_OR_RETURN(const TensorShape shape, TensorShape::Create(dims));
      RDV_ASSIGN_OR_RETURN(const size_t bytes, TensorBytes(dtype, shape.num_elements()));
      if (bytes > env_.options.max_tensor_bytes) {
        return absl::InvalidArgumentError(absl::StrCat("Produce of a ", bytes,
                                                       "-byte tensor; the most is ",
                                                       env_.options.max_tensor_bytes,
                                                       " (RDV_MAX_TENSOR_BYTES)"));
      }
      const MemoryLocation where =
          key.src().IsGpu() ? MemoryLocation::Cuda(key.src().id) : MemoryLocation::Host();
      std::lock_guard lock(mu_);
      Tensor& cached = pattern_tensors_[{item.dtype(), dims, item.seed(), where.ToString()}];
      if (!cached.IsInitialized()) {
        // From the data plane's memory, as a producer that allocates its
        // outputs from rdv's allocator would.
        RDV_ASSIGN_OR_RETURN(cached, MakePatternTensor(dtype, shape, item.seed(),
                                                       data_plane_ ? data_plane_->allocator()
                                                                   : HostAllocator()));
        if (!where.is_host()) {
          RDV_ASSIGN_OR_RETURN(cached, CopyTensor(cached, where));
        }
      }
      tensor = cached;
    }
    RDV_RETURN_IF_ERROR(rendezvous->Send(key, {}, tensor, item.is_dead()));
  }
  return absl::OkStatus();
}

const std::string& WorkerServer::Impl::Bytes(uint64_t size) {
  std::lock_guard lock(mu_);
  std::string& bytes = byte_payloads_[size];
  if (bytes.size() != size) bytes.assign(size, 'r');
  return bytes;
}

void WorkerServer::Impl::AbortStep(const AbortStepRequest& request) {
  absl::Status status(static_cast<absl::StatusCode>(request.code()), request.message());
  if (status.ok()) status = absl::AbortedError(absl::StrCat("AbortStep ", request.step_id()));
  RDV_LOG(Info) << env_.worker_name << ": aborting step " << request.step_id() << ": " << status;
  rendezvous_mgr_.Find(request.step_id())->StartAbort(status);
  if (!request.propagate()) return;
  AbortStepRequest forward = request;
  forward.set_propagate(false);
  for (const std::string& worker : worker_cache_.cluster().WorkerNames()) {
    if (worker == env_.worker_name) continue;
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = worker_cache_.Get(worker);
    if (!client.ok()) continue;
    struct Call {
      grpc::ClientContext context;
      AbortStepRequest request;
      AbortStepResponse response;
      std::shared_ptr<WorkerClient> client;
    };
    auto* call = new Call;
    call->client = *client;
    call->request = forward;
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + env_.options.peer_timeout));
    {
      std::lock_guard lock(mu_);
      ++forwards_in_flight_;
    }
    call->client->stub->async()->AbortStep(
        &call->context, &call->request, &call->response,
        [this, call, worker](grpc::Status forwarded) {
          if (!forwarded.ok()) {
            RDV_LOG(Warning) << "forwarding AbortStep to " << worker
                             << " failed: " << forwarded.error_message();
          }
          delete call;
          std::lock_guard lock(mu_);
          if (--forwards_in_flight_ == 0) forwards_done_.notify_all();
        });
  }
}

absl::StatusOr<std::string> WorkerServer::Impl::RegisterGraph(
    const RegisterGraphRequest& request) {
  graph::GraphDef def;
  if (!def.ParseFromString(request.graph_def())) {
    return absl::InvalidArgumentError("RegisterGraph: graph_def is not a serialized GraphDef");
  }
  for (const graph::NodeDef& node : def.node()) {
    absl::StatusOr<DeviceName> device = DeviceName::Parse(node.device());
    if (device.ok() && !InSameAddressSpace(*device, env_.worker)) {
      return absl::InvalidArgumentError(absl::StrCat(graph::NodeContext(node), "is placed on ",
                                                     node.device(), ", not on ",
                                                     env_.worker_name));
    }
  }
  RDV_ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> executor,
                       graph::Executor::Create(std::move(def)));
  std::lock_guard lock(mu_);
  const std::string handle = absl::StrCat("graph_", ++graphs_registered_);
  graphs_[handle] = std::move(executor);
  return handle;
}

void WorkerServer::Impl::RunGraph(const RunGraphRequest& request, RunGraphResponse* response,
                                  absl::AnyInvocable<void(absl::Status) &&> done) {
  std::shared_ptr<const graph::Executor> executor;
  {
    std::lock_guard lock(mu_);
    auto it = graphs_.find(request.graph_handle());
    if (it != graphs_.end()) executor = it->second;
  }
  if (executor == nullptr) {
    std::move(done)(absl::NotFoundError(absl::StrCat(
        "RunGraph: no graph '", request.graph_handle(), "' on ", env_.worker_name)));
    return;
  }
  graph::Executor::Feeds feeds;
  for (const NamedTensor& feed : request.feeds()) {
    absl::StatusOr<Tensor> value = FromNamedTensor(feed);
    if (!value.ok()) {
      std::move(done)(value.status());
      return;
    }
    feeds.emplace_back(feed.name(), *std::move(value));
  }
  const std::vector<std::string> fetches(request.fetches().begin(), request.fetches().end());
  std::shared_ptr<Rendezvous> rendezvous = rendezvous_mgr_.Find(request.step_id());
  executor->RunAsync(
      rendezvous.get(), feeds, fetches,
      [this, executor, rendezvous, step_id = request.step_id(), fetches, response,
       done = std::move(done)](absl::Status status, std::vector<Tensor> fetched) mutable {
        if (!status.ok()) {
          // The root cause fails the step on the other workers too.
          AbortStepRequest abort;
          abort.set_step_id(step_id);
          abort.set_code(static_cast<int>(status.code()));
          abort.set_message(std::string(status.message()));
          abort.set_propagate(true);
          AbortStep(abort);
        }
        for (size_t i = 0; status.ok() && i < fetched.size(); ++i) {
          status = ToNamedTensor(fetches[i], fetched[i], response->add_fetched());
        }
        std::move(done)(status);
      });
}

absl::Status WorkerServer::Impl::CleanupGraph(const std::string& handle) {
  std::lock_guard lock(mu_);
  if (graphs_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("CleanupGraph: no graph '", handle, "' on ",
                                            env_.worker_name));
  }
  return absl::OkStatus();
}

bool WorkerServer::Impl::Withdraw(int64_t step_id, int64_t request_id) {
  std::lock_guard lock(mu_);
  auto it = live_recvs_.find({step_id, request_id});
  return it == live_recvs_.end() || it->second->Withdraw();
}

absl::Status WorkerServer::Impl::ReleaseTransfers(
    const google::protobuf::RepeatedPtrField<ReleasedTransfer>& transfers) {
  absl::Status status;
  for (const ReleasedTransfer& transfer : transfers) {
    if (transfer.cuda_ipc()) {
      status.Update(cuda_ipc_lent_.Release(transfer));
    } else if (data_plane_ == nullptr) {
      status.Update(absl::FailedPreconditionError(
          absl::StrCat("ReleaseTransfers: worker ", env_.worker_name,
                       " serves protocol grpc, which holds no transport transfers")));
    } else {
      status.Update(data_plane_->Release(transfer));
    }
  }
  return status;
}

void WorkerServer::Impl::CleanupStep(int64_t step_id) {
  rendezvous_mgr_.Cleanup(step_id);
  if (data_plane_ != nullptr) data_plane_->DropStep(step_id);
  cuda_ipc_lent_.DropStep(step_id);
  held_values_.DropIf([step_id](const std::pair<int64_t, int64_t>& held, const HeldValue&) {
    return held.first == step_id;
  });
  std::lock_guard lock(mu_);
  seen_requests_.erase(step_id);
}

absl::StatusOr<WorkerServer::Impl::HeldValue> WorkerServer::Impl::TakeHeldValue(
    int64_t step_id, int64_t request_id) {
  std::optional<HeldValue> value = held_values_.Take({step_id, request_id});
  if (value.has_value()) return *std::move(value);
  return absl::NotFoundError(absl::StrCat(
      "RecvTensor fetch_held: worker ", env_.worker_name, " holds no value for request ",
      request_id, " of step ", step_id,
      " (already fetched, its step cleaned up, or its consumer lost)"));
}

absl::Status WorkerServer::Impl::Start() {
  RDV_RETURN_IF_ERROR(CheckExposure(options_.listen_address, env_.options.security,
                                    absl::StrCat("worker ", env_.worker_name)));
  RDV_RETURN_IF_ERROR(cuda::CheckSettings());
  if (options_.protocol != kProtocolGrpc) {
    RDV_ASSIGN_OR_RETURN(DataPlaneOptions plane_options, DataPlaneOptions::FromEnvironment());
    RDV_ASSIGN_OR_RETURN(data_plane_, DataPlane::Create(options_.protocol, plane_options));
    env_.data_plane = data_plane_.get();
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address, ServerCredentialsFor(env_.options.security),
                           &port);
  builder.RegisterService(&worker_service_);
  if (options_.enable_driver) builder.RegisterService(&driver_service_);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(-1);
  // Peers ping often to notice a dead worker quickly (PeerChannelArguments).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options_.listen_address, "' (in use or not local?)"));
  }
  const size_t colon = options_.listen_address.rfind(':');
  address_ = absl::StrCat(options_.listen_address.substr(0, colon), ":", port);
  RDV_LOG(Info) << env_.worker_name << " listening on " << address_ << ", incarnation "
                << FormatIncarnation(env_.incarnation);
  return absl::OkStatus();
}

void WorkerServer::Impl::Shutdown() {
  if (server_ == nullptr) return;
  rendezvous_mgr_.CleanupAll();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  rendezvous_mgr_.CleanupAll();
  // Before the worker cache goes: what is held keeps leases on its clients.
  held_values_.Clear();
  cuda_ipc_lent_.Clear();
  if (data_plane_ != nullptr) data_plane_->DropAllHeld();
  // Forwarded aborts carry a deadline, so this wait is bounded.
  std::unique_lock lock(mu_);
  forwards_done_.wait(lock, [this] { return forwards_in_flight_ == 0; });
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(WorkerServerOptions options) {
  if (options.task < 0) return absl::InvalidArgumentError("worker task must be >= 0");
  if (!DeviceName::Parse(absl::StrCat("/job:", options.job)).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker job '", options.job, "' must be a letter then [A-Za-z0-9_]"));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  RDV_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl)));
}

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerServer::~WorkerServer() { Shutdown(); }
const std::string& WorkerServer::worker_name() const { return impl_->env_.worker_name; }
uint64_t WorkerServer::incarnation() const { return impl_->env_.incarnation; }
const std::string& WorkerServer::address() const { return impl_->address_; }
RendezvousMgr& WorkerServer::rendezvous_mgr() { return impl_->rendezvous_mgr_; }
WorkerCache& WorkerServer::worker_cache() { return impl_->worker_cache_; }
void WorkerServer::Shutdown() { impl_->Shutdown(); }
DataPlane* WorkerServer::data_plane() { return impl_->data_plane_.get(); }

}  // namespace rdv::control
