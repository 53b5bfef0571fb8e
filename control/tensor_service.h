// The producer side of RecvTensor: what happens when a consumer asks this
// worker for a tensor. A request is admitted (this worker is the key's
// source, the incarnation matches, the request is new), waits for the
// local Send, and the value leaves by the route its memory and the
// consumer's protocol call for: inline in the stream, in chunks, offered
// through the data plane (the consumer gets it, or this worker sends it
// tagged), lent by CUDA IPC, or staged off the GPU. What is kept for a
// consumer until it releases it (a transfer, a value for its fetch_held
// call, a lent GPU allocation) is leased to that consumer and freed when
// it is lost (control/consumer_lease.h), its step is cleaned up, or the
// worker goes.
//
// Thread-safe. RecvTensor's reactor runs on gRPC's threads and the
// rendezvous' Send thread; nothing here blocks a gRPC thread except
// Withdraw, which waits for a Send already delivering to finish.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "control/consumer_lease.h"
#include "control/fast_keys.h"
#include "control/held_transfers.h"
#include "control/leased_table.h"
#include "control/rendezvous_mgr.h"
#include "rdv/control/worker.pb.h"
#include "control/worker_env.h"

namespace rdv::control {

class TensorService {
 public:
  // `env` and `rendezvous_mgr` outlive this.
  TensorService(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr);

  // Serves one RecvTensor call. `door`: whether the caller passed the door
  // (AdmitCaller); a refused caller's call ends with that status. A value
  // taken for a call whose consumer never got its status goes back to the
  // step.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* RecvTensor(grpc::CallbackServerContext* context,
                                                         const absl::Status& door,
                                                         const grpc::ByteBuffer* request);
  // True when the RecvTensor `request_id` of `step_id` was still waiting and
  // is now withdrawn (or never arrived, or already ended without a value).
  bool Withdraw(int64_t step_id, int64_t request_id);
  // Frees what the consumer read; an error names what could not be freed.
  absl::Status ReleaseTransfers(
      const google::protobuf::RepeatedPtrField<ReleasedTransfer>& transfers);
  // Frees what is kept for the step's consumers and forgets its requests.
  void DropStep(int64_t step_id);
  // Frees everything kept for consumers (at shutdown, before the worker
  // cache that the leases watch through goes).
  void DropAllHeld();
  // How much is kept for consumers now (transfers, sends, values, lent).
  void CountHoldings(HoldingsResponse* holdings) const;

  // The fast path's ids of keys this worker answered (control/fast_path.h).
  FastKeyIds& fast_key_ids() { return fast_key_ids_; }
  // Keeps `value` of `key` for the fetch_held RecvTensor `request_id` of
  // `step_id` (a fast-path request whose value the consumer did not expect),
  // leased to the key's consumer.
  void HoldForFetch(int64_t step_id, int64_t request_id, const ParsedKey& key, Tensor value,
                    bool is_dead);
  // A value kept under its step and request id: for a single_message
  // RecvTensor whose answer needs a stream, or a fast-path request whose
  // value the consumer did not expect. Its fetch_held call, or the fast
  // path's held request, takes it.
  struct HeldValue {
    std::string key;  // the rendezvous key it answers
    Tensor value;
    bool is_dead = false;
  };
  // The value held for request `request_id` of `step_id` of `key`, once;
  // NOT_FOUND when there is none (already fetched, its step cleaned up, or
  // its consumer lost), or it answers another key (and then stays).
  absl::StatusOr<HeldValue> TakeHeldValue(int64_t step_id, int64_t request_id,
                                          absl::string_view key);

 private:
  class Reactor;
  // Checks that this worker is the key's source and that the request is
  // new.
  absl::Status Admit(const RecvTensorRequest& request, const ParsedKey& key);
  // Watches the consumer `key` names for what is held for it.
  ConsumerWatcher WatcherFor(const ParsedKey& key) const {
    return ConsumerWatcher(*env_.worker_cache, env_.worker_name, key);
  }
  void Register(int64_t step_id, int64_t request_id, Reactor* reactor);
  void Unregister(int64_t step_id, int64_t request_id);

  const WorkerEnv& env_;
  RendezvousMgr& rendezvous_mgr_;
  // GPU tensors lent to consumers on this host (control/cuda_ipc_transfer.h).
  HeldTransfers cuda_ipc_lent_;
  LeasedTable<std::pair<int64_t, int64_t>, HeldValue> held_values_;
  FastKeyIds fast_key_ids_;

  std::mutex mu_;
  // RecvTensor calls in progress, by (step, request id), for Withdraw.
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Reactor*> live_recvs_;  // mu_
  // Request ids seen per step, so that a repeated RecvTensor is refused.
  absl::flat_hash_map<int64_t, absl::flat_hash_set<int64_t>> seen_requests_;  // mu_
};

}  // namespace rdv::control
