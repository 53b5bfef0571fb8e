// The rendezvous of one step on one worker, whatever the protocol. Send is
// always local: the value waits here until its consumer asks. A Recv whose
// source device is on this worker is served locally
// (IntraProcessRendezvous); one whose source is on another worker becomes a
// RecvTensor call to it (control/recv_tensor_call.h), and the payload
// travels in the call's answer or through the data plane the answer names.
//
// Recv callbacks run on the threads listed in core/rendezvous.h, or on a
// gRPC completion thread or the transport's progress thread for remote
// Recvs, or on the calling thread for a value read ahead
// (control/read_ahead.h). Each remote Recv is its own
// call: several Recvs of one key may reach the producer, and so get its
// values, in another order than they were made (as in TensorFlow). A Recv
// cancelled while the producer is serving it may take the value with it
// when its answer was already on its way; one cancelled before leaves the
// value for the next Recv (the producer gives back a value whose call
// never delivered its status). A Recv
// made after the step's abort, or with its cancellation manager already
// cancelled, fails at once, as a local one does.
// tests/control/rpc_rendezvous_conformance_test.cc runs the core
// Rendezvous suite on it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <mutex>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_set.h"
#include "rdv/control/worker.pb.h"
#include "control/fast_keys.h"
#include "control/read_ahead.h"
#include "control/recv_tensor_call.h"
#include "control/worker_env.h"
#include "core/intra_process_rendezvous.h"

namespace rdv::control {

class FastRecvCall;

class RpcRemoteRendezvous final : public Rendezvous,
                                  public std::enable_shared_from_this<RpcRemoteRendezvous> {
 public:
  // `env` must outlive this rendezvous.
  RpcRemoteRendezvous(const WorkerEnv* env, int64_t step_id);

  // INVALID_ARGUMENT when the key's source device is not on this worker.
  absl::Status Send(const ParsedKey& key, const RendezvousArgs& args, const Tensor& value,
                    bool is_dead) override;
  void RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                 RecvDoneCallback done) override;
  // A remote Recv runs its RecvTensor call on the calling thread.
  absl::Status Recv(const ParsedKey& key, const RendezvousArgs& args, Tensor* value,
                    bool* is_dead, absl::Duration timeout = absl::InfiniteDuration()) override;
  // Also ends this step's RecvTensor calls in flight, with `status`.
  void StartAbort(const absl::Status& status) override;

  LocalRendezvous::Pending CountPending() const { return local_.CountPending(); }
  // Remote Recvs in flight (RecvTensor calls not finished).
  size_t CountRemoteCalls();

 private:
  using Finish = ReadAhead::Finish;
  void RecvRemote(const ParsedKey& key, const RendezvousArgs& args, RecvDoneCallback done);
  // A Recv of a key the fast path knows: from a slot read ahead, or its own.
  void RecvKnown(const ParsedKey& key, const RendezvousArgs& args,
                 std::shared_ptr<WorkerClient> worker, KnownFastKey known, Finish finish);
  // A fast-path Recv of `key`, or the read-ahead call of `ahead` (without
  // the Recv's landing and cancellation): NewFast makes it and hooks it,
  // StartFast starts it too.
  void StartFast(const ParsedKey& key, const RendezvousArgs& args,
                 std::shared_ptr<WorkerClient> worker, KnownFastKey known,
                 const std::shared_ptr<ReadAhead::Slot>& ahead, Finish finish);
  std::shared_ptr<FastRecvCall> NewFast(const ParsedKey& key, const RendezvousArgs& args,
                                        std::shared_ptr<WorkerClient> worker, KnownFastKey known,
                                        const std::shared_ptr<ReadAhead::Slot>& ahead,
                                        Finish finish);
  // A Recv of a key the fast path does not know that takes a value read
  // ahead before it forgot the key, or by RecvTensor when the producer did
  // not serve that one.
  void AwaitLeft(const ParsedKey& key, const RendezvousArgs& args,
                 std::shared_ptr<WorkerClient> worker, MemoryLocation destination,
                 std::shared_ptr<ReadAhead::Slot> slot, Finish finish);
  void RecvByRecvTensor(const ParsedKey& key, const RendezvousArgs& args,
                        std::shared_ptr<WorkerClient> worker, MemoryLocation destination,
                        Finish finish);
  // The Recv waits for `slot`'s value; its cancellation gives the slot back.
  void AwaitAhead(const ParsedKey& key, const RendezvousArgs& args,
                  std::shared_ptr<ReadAhead::Slot> slot, Finish finish);
  void WithdrawAhead(const std::string& key, const std::shared_ptr<ReadAhead::Slot>& slot);
  // Values of `known`'s size read ahead (ControlOptions::read_ahead_bytes)
  // for a Recv that `lands` in a destination of its own or not.
  size_t ReadAheadDepth(const KnownFastKey& known, bool lands) const;
  // Not OK for a Recv that fails at once, as a local one does: its step was
  // aborted, or its cancellation manager was cancelled before it began.
  absl::Status RefusedAtOnce(const ParsedKey& key, const RendezvousArgs& args);
  // What the fast path knows of `key` from its producer, when it serves
  // this Recv (control/fast_path.h).
  std::optional<KnownFastKey> KnownFast(const ParsedKey& key, const WorkerClient& worker) const;
  // Carries the releases queued for `worker`; starts learning how it moves
  // payloads, once.
  RecvTensorRequest MakeRequest(const ParsedKey& key, MemoryLocation destination,
                                const std::shared_ptr<WorkerClient>& worker) const;
  // The fields every RecvTensor request of this step carries.
  RecvTensorRequest StepRequestFields() const;
  // StepRequestFields, made once: the fast-path Recvs of the step share it
  // as the request they make if the value changed, so that a Recv copies
  // no key or address strings for a fallback it rarely takes. It carries
  // no queued releases: those wait for a request that surely goes.
  std::shared_ptr<const RecvTensorRequest> FallbackFields();
  // Hooks `call` to this step's abort and to its Recv's cancellation
  // manager (`token` registered there); Unhook undoes both, after which
  // neither calls Abort.
  void Hook(AbortableCall* call, absl::string_view key, CancellationManager* cancel,
            CancellationManager::Token token);
  void Unhook(AbortableCall* call, CancellationManager* cancel, CancellationManager::Token token);
  // A call's detach: Unhook, keeping this rendezvous until the call ends.
  RecvTensorCall::Detach DetachFrom(CancellationManager* cancel, CancellationManager::Token token);
  // The abort status when aborted (the call must then end at once).
  absl::Status Track(AbortableCall* call);
  void Untrack(AbortableCall* call);

  const WorkerEnv* const env_;
  const int64_t step_id_;
  absl::once_flag fallback_fields_once_;
  std::shared_ptr<const RecvTensorRequest> fallback_fields_;  // set once
  IntraProcessRendezvous local_;
  // Recursive: aborting a call may complete it inline, and its completion
  // untracks it under this lock.
  std::recursive_mutex mu_;
  absl::Status abort_status_;                          // guarded by mu_
  absl::flat_hash_set<AbortableCall*> active_calls_;  // guarded by mu_
  ReadAhead read_ahead_;
};

}  // namespace rdv::control
