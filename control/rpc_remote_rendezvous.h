// The rendezvous of one step on one worker, whatever the protocol. Send is
// always local: the value waits here until its consumer asks. A Recv whose
// source device is on this worker is served locally
// (IntraProcessRendezvous); one whose source is on another worker becomes a
// RecvTensor call to it (control/recv_tensor_call.h), and the payload
// travels in the call's answer or through the data plane the answer names.
//
// Recv callbacks run on the threads listed in core/rendezvous.h, or on a
// gRPC completion thread for remote Recvs.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "control/worker.pb.h"
#include "control/worker_env.h"
#include "core/intra_process_rendezvous.h"

namespace rdv::control {

class AbortableCall;

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

 private:
  void RecvRemote(const ParsedKey& key, const RendezvousArgs& args, RecvDoneCallback done);
  // Carries the releases queued for `worker`.
  RecvTensorRequest MakeRequest(const ParsedKey& key, MemoryLocation destination,
                                const WorkerClient& worker) const;
  // Hooks `call` to this step's abort and to its Recv's cancellation
  // manager (`token` registered there); Unhook undoes both, after which
  // neither calls Abort.
  void Hook(AbortableCall* call, absl::string_view key, CancellationManager* cancel,
            CancellationManager::Token token);
  void Unhook(AbortableCall* call, CancellationManager* cancel, CancellationManager::Token token);
  // The abort status when aborted (the call must then end at once).
  absl::Status Track(AbortableCall* call);
  void Untrack(AbortableCall* call);

  const WorkerEnv* const env_;
  const int64_t step_id_;
  IntraProcessRendezvous local_;
  // Recursive: aborting a call may complete it inline, and its completion
  // untracks it under this lock.
  std::recursive_mutex mu_;
  absl::Status abort_status_;                          // guarded by mu_
  absl::flat_hash_set<AbortableCall*> active_calls_;  // guarded by mu_
};

}  // namespace rdv::control
