#include "control/rpc_remote_rendezvous.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/cuda_ipc_transfer.h"
#include "control/fast_path.h"
#include "control/peer_handshake.h"
#include "control/protocol.h"
#include "control/recv_exchange.h"
#include "control/recv_tensor_call.h"
#include "core/device_copy.h"
#include "core/dtype.h"
#include "core/logging.h"

namespace rdv::control {
namespace {

// Unique per consumer process; the random start keeps two consumers (or a
// restarted one) from reusing each other's ids.
int64_t NextRequestId() {
  static std::atomic<int64_t> next{[] {
    std::random_device random;
    return static_cast<int64_t>((uint64_t{random()} << 31 ^ random()) & ((uint64_t{1} << 62) - 1));
  }()};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// What a Recv of another worker's value needs to be counted when it ends,
// and logged at RDV_LOG_LEVEL=debug (the key is copied only then).
class RecvRecord {
 public:
  RecvRecord(WorkerStats* stats, const ParsedKey& key) : stats_(stats) {
    stats_->RecvStarted();
    if (LogEnabled(LogLevel::kDebug)) key_ = std::string(key.FullKey());
  }

  void Ended(const absl::Status& status, const Tensor& tensor) const {
    const absl::Duration elapsed = absl::Now() - start_;
    stats_->RecvEnded(status, tensor.TotalBytes(), elapsed);
    if (key_.empty()) return;
    const int64_t us = absl::ToInt64Microseconds(elapsed);
    if (status.ok()) {
      RDV_LOG(Debug) << "received '" << key_ << "': " << tensor.TotalBytes() << " bytes in " << us
                     << " us";
    } else {
      RDV_LOG(Debug) << "Recv of '" << key_ << "' failed after " << us << " us: " << status;
    }
  }

 private:
  WorkerStats* const stats_;
  const absl::Time start_ = absl::Now();
  std::string key_;
};

// A known key's value bound for a GPU comes by the fast path into host
// memory, then by DMA: the Recv ends once the copy has, so the GPU sees the
// bytes.
ReadAhead::Finish ThenCopiedTo(MemoryLocation destination, ReadAhead::Finish finish) {
  return [destination, finish = std::move(finish)](absl::Status status, Tensor tensor,
                                                   bool is_dead) mutable {
    if (!status.ok() || !NeedsCopyTo(destination, tensor, is_dead)) {
      return std::move(finish)(std::move(status), std::move(tensor), is_dead);
    }
    CopyTensorAsync(tensor, destination, EndWhenCopied(std::move(finish)));
  };
}

}  // namespace

RpcRemoteRendezvous::RpcRemoteRendezvous(const WorkerEnv* env, int64_t step_id)
    : env_(env), step_id_(step_id) {}

absl::Status RpcRemoteRendezvous::Send(const ParsedKey& key, const RendezvousArgs& args,
                                       const Tensor& value, bool is_dead) {
  if (!InSameAddressSpace(key.src(), env_->worker)) {
    return absl::InvalidArgumentError(absl::StrCat("Send of '", key.FullKey(),
                                                   "' on worker ", env_->worker_name,
                                                   ": its source device is on another worker"));
  }
  return local_.Send(key, args, value, is_dead);
}

void RpcRemoteRendezvous::RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                                    RecvDoneCallback done) {
  if (InSameAddressSpace(key.src(), env_->worker)) {
    local_.RecvAsync(key, args, std::move(done));
  } else {
    RecvRemote(key, args, std::move(done));
  }
}

absl::Status RpcRemoteRendezvous::RefusedAtOnce(const ParsedKey& key,
                                                const RendezvousArgs& args) {
  if (args.cancellation_manager != nullptr && args.cancellation_manager->IsCancelled()) {
    return RecvCancelledError(key.FullKey());
  }
  std::lock_guard lock(mu_);
  return abort_status_;
}

void RpcRemoteRendezvous::RecvRemote(const ParsedKey& key, const RendezvousArgs& args,
                                     RecvDoneCallback done) {
  if (const absl::Status refused = RefusedAtOnce(key, args); !refused.ok()) {
    std::move(done)(refused, RendezvousArgs{}, args, Tensor(), false);
    return;
  }
  absl::StatusOr<std::shared_ptr<WorkerClient>> worker =
      env_->worker_cache->Get(key.src().WorkerName());
  if (!worker.ok()) {
    std::move(done)(worker.status(), RendezvousArgs{}, args, Tensor(), false);
    return;
  }
  Finish finish = [done = std::move(done), args, record = RecvRecord(env_->stats, key)](
                      absl::Status status, Tensor tensor, bool is_dead) mutable {
    record.Ended(status, tensor);
    std::move(done)(status, RendezvousArgs{}, args, tensor, is_dead);
  };
  const MemoryLocation destination = RecvDestination(key, args);
  std::optional<KnownFastKey> known = KnownFast(key, **worker);
  if (known.has_value()) {
    if (!destination.is_host()) finish = ThenCopiedTo(destination, std::move(finish));
    return RecvKnown(key, args, *std::move(worker), *std::move(known), std::move(finish));
  }
  if (std::shared_ptr<ReadAhead::Slot> left = read_ahead_.TakeLeft(key.FullKey())) {
    return AwaitLeft(key, args, *std::move(worker), destination, std::move(left),
                     std::move(finish));
  }
  RecvByRecvTensor(key, args, *std::move(worker), destination, std::move(finish));
}

void RpcRemoteRendezvous::AwaitLeft(const ParsedKey& key, const RendezvousArgs& args,
                                    std::shared_ptr<WorkerClient> worker,
                                    MemoryLocation destination,
                                    std::shared_ptr<ReadAhead::Slot> slot, Finish finish) {
  AwaitAhead(key, args, std::move(slot),
             [self = shared_from_this(), key, args, worker = std::move(worker), destination,
              finish = std::move(finish)](absl::Status status, Tensor value,
                                          bool is_dead) mutable {
               // Not served: the producer still has this value for the Recv.
               if (IsNotServedAhead(status)) {
                 return self->RecvByRecvTensor(key, args, std::move(worker), destination,
                                               std::move(finish));
               }
               if (!destination.is_host()) finish = ThenCopiedTo(destination, std::move(finish));
               std::move(finish)(std::move(status), std::move(value), is_dead);
             });
}

void RpcRemoteRendezvous::RecvByRecvTensor(const ParsedKey& key, const RendezvousArgs& args,
                                           std::shared_ptr<WorkerClient> worker,
                                           MemoryLocation destination, Finish finish) {
  CancellationManager* const cancel = args.cancellation_manager;
  const CancellationManager::Token token = cancel ? cancel->NewToken() : 0;
  RecvTensorRequest request = MakeRequest(key, destination, worker);
  auto* call = new RecvTensorCall(std::move(worker), env_->data_plane, std::move(request),
                                  destination, DetachFrom(cancel, token), std::move(finish),
                                  args.landing);
  Hook(call, key.FullKey(), cancel, token);
  call->Start();
}

void RpcRemoteRendezvous::RecvKnown(const ParsedKey& key, const RendezvousArgs& args,
                                    std::shared_ptr<WorkerClient> worker, KnownFastKey known,
                                    Finish finish) {
  std::vector<std::shared_ptr<ReadAhead::Slot>> started;
  std::shared_ptr<ReadAhead::Slot> slot =
      read_ahead_.Take(key.FullKey(), ReadAheadDepth(known, args.landing != nullptr), &started);
  std::vector<std::shared_ptr<FastRecvCall>> calls;
  for (std::shared_ptr<ReadAhead::Slot>& ahead : started) {
    calls.push_back(NewFast(key, {}, worker, known, ahead,
                            [ahead](absl::Status status, Tensor value, bool is_dead) mutable {
                              ahead->Deliver(std::move(status), std::move(value), is_dead);
                            }));
  }
  // The slots' requests go together, in their order.
  if (!calls.empty()) env_->fast_path->StartAll(calls);
  if (slot == nullptr) {
    return StartFast(key, args, std::move(worker), std::move(known), nullptr, std::move(finish));
  }
  AwaitAhead(key, args, std::move(slot),
             [self = shared_from_this(), key, args, worker, known, finish = std::move(finish)](
                 absl::Status status, Tensor value, bool is_dead) mutable {
               // Not served: this Recv asks for itself.
               if (IsNotServedAhead(status)) {
                 return self->StartFast(key, args, std::move(worker), std::move(known), nullptr,
                                        std::move(finish));
               }
               std::move(finish)(std::move(status), std::move(value), is_dead);
             });
}

void RpcRemoteRendezvous::StartFast(const ParsedKey& key, const RendezvousArgs& args,
                                    std::shared_ptr<WorkerClient> worker, KnownFastKey known,
                                    const std::shared_ptr<ReadAhead::Slot>& ahead,
                                    Finish finish) {
  NewFast(key, args, std::move(worker), std::move(known), ahead, std::move(finish))->Start();
}

std::shared_ptr<FastRecvCall> RpcRemoteRendezvous::NewFast(
    const ParsedKey& key, const RendezvousArgs& args, std::shared_ptr<WorkerClient> worker,
    KnownFastKey known, const std::shared_ptr<ReadAhead::Slot>& ahead, Finish finish) {
  CancellationManager* const cancel = args.cancellation_manager;
  const CancellationManager::Token token = cancel ? cancel->NewToken() : 0;
  std::shared_ptr<FastRecvCall> call = env_->fast_path->NewRecv(
      std::move(worker), step_id_, std::string(key.FullKey()), std::move(known),
      FallbackFields(), NextRequestId(), ahead == nullptr ? args.landing : nullptr,
      DetachFrom(cancel, token), std::move(finish), /*ahead=*/ahead != nullptr);
  Hook(call.get(), key.FullKey(), cancel, token);
  return call;
}

void RpcRemoteRendezvous::AwaitAhead(const ParsedKey& key, const RendezvousArgs& args,
                                     std::shared_ptr<ReadAhead::Slot> slot, Finish finish) {
  CancellationManager* const cancel = args.cancellation_manager;
  if (cancel == nullptr) return slot->Claim(std::move(finish));
  const CancellationManager::Token token = cancel->NewToken();
  // Set by a cancellation that may have come before the claim, which then
  // withdraws it itself.
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  auto withdraw = [self = shared_from_this(), key = std::string(key.FullKey()), slot, cancelled] {
    cancelled->store(true);
    self->WithdrawAhead(key, slot);
  };
  if (!cancel->RegisterCallback(token, withdraw)) cancelled->store(true);
  slot->Claim([cancel, token, finish = std::move(finish)](absl::Status status, Tensor value,
                                                         bool is_dead) mutable {
    cancel->DeregisterCallback(token);
    std::move(finish)(std::move(status), std::move(value), is_dead);
  });
  if (cancelled->load()) WithdrawAhead(std::string(key.FullKey()), slot);
}

void RpcRemoteRendezvous::WithdrawAhead(const std::string& key,
                                        const std::shared_ptr<ReadAhead::Slot>& slot) {
  ReadAhead::Finish withdrawn;
  if (read_ahead_.Withdraw(key, slot, &withdrawn)) {
    std::move(withdrawn)(RecvCancelledError(key), Tensor(), false);
  }
}

size_t RpcRemoteRendezvous::ReadAheadDepth(const KnownFastKey& known, bool lands) const {
  const int64_t elements = std::max<int64_t>(known.shape.num_elements(), 0);
  const size_t bytes = DTypeSize(known.dtype) * static_cast<size_t>(elements);
  if (lands && bytes > ReadAhead::kMaxLandedValueBytes) return 0;
  return ReadAhead::DepthFor(env_->options.read_ahead_bytes, bytes);
}

std::optional<KnownFastKey> RpcRemoteRendezvous::KnownFast(const ParsedKey& key,
                                                           const WorkerClient& worker) const {
  if (env_->fast_path == nullptr) return std::nullopt;
  return worker.fast_keys.Find(key.FullKey());
}

RecvTensorRequest RpcRemoteRendezvous::MakeRequest(
    const ParsedKey& key, MemoryLocation destination,
    const std::shared_ptr<WorkerClient>& worker) const {
  RecvTensorRequest request = StepRequestFields();
  request.set_rendezvous_key(std::string(key.FullKey()));
  request.set_request_id(NextRequestId());
  if (env_->data_plane != nullptr) {
    LearnTransferOp(worker, env_->handshake, env_->data_plane->transport().name());
  }
  worker->releases->TakeQueued(request.mutable_released());
  RequestCudaIpc(destination, &request);
  return request;
}

RecvTensorRequest RpcRemoteRendezvous::StepRequestFields() const {
  RecvTensorRequest request;
  request.set_step_id(step_id_);
  request.set_protocol(env_->protocol);
  request.set_protocol_version(kProtocolVersion);
  request.set_fast_path(env_->fast_path != nullptr);
  if (env_->data_plane != nullptr) {
    request.set_consumer_transport_address(env_->data_plane->local_address());
  }
  return request;
}

std::shared_ptr<const RecvTensorRequest> RpcRemoteRendezvous::FallbackFields() {
  absl::call_once(fallback_fields_once_, [this] {
    fallback_fields_ = std::make_shared<const RecvTensorRequest>(StepRequestFields());
  });
  return fallback_fields_;
}

absl::Status RpcRemoteRendezvous::Recv(const ParsedKey& key, const RendezvousArgs& args,
                                       Tensor* value, bool* is_dead, absl::Duration timeout) {
  if (InSameAddressSpace(key.src(), env_->worker)) {
    return Rendezvous::Recv(key, args, value, is_dead, timeout);
  }
  RDV_RETURN_IF_ERROR(RefusedAtOnce(key, args));
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> worker,
                       env_->worker_cache->Get(key.src().WorkerName()));
  // A known key's Recv is the fast path's RecvAsync, waited for here; so is
  // one that takes a value read ahead before the fast path forgot the key.
  if (KnownFast(key, *worker).has_value() || read_ahead_.HasLeft(key.FullKey())) {
    return Rendezvous::Recv(key, args, value, is_dead, timeout);
  }
  const MemoryLocation destination = RecvDestination(key, args);
  RecvTensorRequest request = MakeRequest(key, destination, worker);
  BlockingRecvTensorCall call(std::move(worker), env_->data_plane, std::move(request),
                              destination, timeout, env_->options.peer_timeout);
  CancellationManager* const cancel = args.cancellation_manager;
  const CancellationManager::Token token = cancel ? cancel->NewToken() : 0;
  Hook(&call, key.FullKey(), cancel, token);
  const RecvRecord record(env_->stats, key);
  const absl::Status status = call.Run(value, is_dead);
  record.Ended(status, status.ok() ? *value : Tensor());
  Unhook(&call, cancel, token);
  if (absl::IsDeadlineExceeded(status)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Recv of '", key.FullKey(), "' timed out after ", absl::FormatDuration(timeout)));
  }
  return status;
}

RecvTensorCall::Detach RpcRemoteRendezvous::DetachFrom(CancellationManager* cancel,
                                                       CancellationManager::Token token) {
  return [self = shared_from_this(), cancel, token](AbortableCall* call) {
    self->Unhook(call, cancel, token);
  };
}

void RpcRemoteRendezvous::Hook(AbortableCall* call, absl::string_view key,
                               CancellationManager* cancel, CancellationManager::Token token) {
  if (const absl::Status aborted = Track(call); !aborted.ok()) call->Abort(aborted);
  if (cancel != nullptr &&
      !cancel->RegisterCallback(token, [call, key = std::string(key)] {
        call->Cancel(RecvCancelledError(key));
      })) {
    call->Abort(RecvCancelledError(key));
  }
}

void RpcRemoteRendezvous::Unhook(AbortableCall* call, CancellationManager* cancel,
                                 CancellationManager::Token token) {
  if (cancel != nullptr) cancel->DeregisterCallback(token);
  Untrack(call);
}

absl::Status RpcRemoteRendezvous::Track(AbortableCall* call) {
  std::lock_guard lock(mu_);
  active_calls_.insert(call);
  return abort_status_;
}

void RpcRemoteRendezvous::Untrack(AbortableCall* call) {
  std::lock_guard lock(mu_);
  active_calls_.erase(call);
}

size_t RpcRemoteRendezvous::CountRemoteCalls() {
  std::lock_guard lock(mu_);
  return active_calls_.size();
}

void RpcRemoteRendezvous::StartAbort(const absl::Status& status) {
  const absl::Status abort_status =
      status.ok() ? absl::AbortedError("rendezvous aborted with an OK status") : status;
  local_.StartAbort(abort_status);
  read_ahead_.Clear();
  std::lock_guard lock(mu_);
  if (!abort_status_.ok()) return;
  abort_status_ = abort_status;
  const std::vector<AbortableCall*> calls(active_calls_.begin(), active_calls_.end());
  for (AbortableCall* call : calls) call->Abort(abort_status);
}

}  // namespace rdv::control
