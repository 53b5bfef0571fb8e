// The fast path: a Recv of a key this worker already received from the same
// producer makes no RecvTensor call. The first Recv of a key takes
// RecvTensor as always; the producer's answer gives the consumer an id for
// the key (TensorMeta.fast_path_key, control/fast_keys.h). A later Recv of
// it:
//   1. allocates the destination from the value's last dtype and shape and
//      readies it under a new request id: design A posts a tagged receive
//      into it; design B (TensorMeta.fast_path_put) registers it on its own
//      for the producer's write;
//   2. sends the producer a request message through the data plane's
//      transport (plugin ABI v3 messages): {key id, step, request id,
//      dtype, shape}, and for B the destination's address and remote key
//      (read-ahead's top-ups of a key: several in one message, StartAll);
//   3. the producer, on its transport's progress thread, waits for the
//      key's next value in that step (RecvAsync, no thread waits), then
//      A: sends it tagged under the request id, straight into the
//      destination; B: writes it there (put, complete once it landed) and
//      sends a landed notice;
//   4. a value that cannot come so is announced by a notice instead: dead
//      (the Recv ends is_dead), reshaped (another dtype or shape, which the
//      notice gives: the value is held, and the consumer asks for it again,
//      with a destination of that shape, by a held request), changed (a
//      value the fast path cannot carry, or a held request's that still
//      does not fit: held, and fetched by a fetch_held RecvTensor), or
//      failed (the Recv fails with the producer's status).
// A producer that sends tagged (UCX over shared memory or tcp) answers by
// A, unless RDV_FAST_PATH_WRITES, or by D for a key whose value lay in
// memory the consumer copies itself (DataPlane::ReadByPeerCopy: UCX's
// mapped segments between processes of one host): it holds the value and
// sends a readable notice {transfer, address, remote key}; the consumer
// reads it into the destination (a get), then sends a release. A read
// request whose value is not in such memory is answered `changed`. One
// that is read from (verbs, UCX over RDMA) answers by B, or with
// RDV_FAST_PATH_READS by D. B's registration ends with the transfer, which revokes the
// producer's access where the transport can (verbs, UCX over RDMA).
// A producer keeps at most kMaxWaitingRequests requests waiting for values;
// past that it answers "slow path", and the Recv asks by RecvTensor as if
// the key were new, so what any consumer sends holds bounded memory here.
// The destination is the Recv's landing buffer (RendezvousArgs::landing)
// when it has the value's size, else the transport's memory.
// The transfer is a SideTransfer: bounded by the producer's life
// (PeerWatch), ended by the step's abort and the Recv's cancellation.
//
// Trust: a request names an id the producer issued over the control plane
// (where the door admits only members) to one consumer transport address;
// the value goes to that address only. A request or notice that does not
// parse, or names an unknown id or request, is dropped and counted.
//
// Cancellation (the Recv's manager, or the blocking Recv's timeout) loses
// no value: the consumer sends a withdrawal, and the Recv ends CANCELLED
// only when the producer answers that its wait was withdrawn before it took
// a value. A value already taken still arrives, and the Recv completes with
// it, as a slow Recv's withdrawal does (WithdrawRecvTensor).
//
// A value bound for a GPU comes into host memory and then by DMA to the
// GPU; the Recv ends once that copy has. Not covered yet (they keep to
// RecvTensor): values the producer holds on a GPU, string tensors,
// transports without messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/cancellation.h"
#include "control/fast_keys.h"
#include "control/fast_path_wire.h"
#include "control/recv_tensor_call.h"
#include "control/rendezvous_mgr.h"
#include "control/tensor_service.h"
#include "control/worker_env.h"

namespace rdv::control {

class FastRecvCall;

// The consumer's fast Recvs waiting for the notices that may end them, by
// request id. Shared with the calls, which may end after the FastPath.
struct FastWaiting {
  std::mutex mu;
  absl::flat_hash_map<uint64_t, std::weak_ptr<FastRecvCall>> calls;  // mu
  bool stopped = false;  // mu: no notice is taken any more (FastPath::Stop)
  // Fast Recvs the producer sent to RecvTensor (a value the fast path
  // cannot carry, or not in its memory, too many requests waiting there).
  std::atomic<int64_t> fetched_by_recv_tensor{0};
  // Fast Recvs asked for again, by a held request, after a reshaped notice.
  std::atomic<int64_t> asked_again{0};
  // Messages sent that carried requests (FastPath::StartAll's batches once).
  std::atomic<int64_t> request_messages{0};
};

class FastPath {
 public:
  using Done = RecvTensorCall::Done;
  using Detach = RecvTensorCall::Detach;

  // Takes the data plane's messages from here until destroyed. Everything
  // given outlives this.
  FastPath(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr, TensorService& tensors);
  ~FastPath();
  // Takes no more messages (waits for one being taken), and ends the
  // fast Recvs that wait for a notice, which cannot come now. Before the
  // steps are cleaned up at shutdown: no request then starts a wait on a
  // step.
  void Stop();
  FastPath(const FastPath&) = delete;
  FastPath& operator=(const FastPath&) = delete;

  // A Recv of `key` in `step_id` from `worker`, which gave this worker
  // `known`, with id `request_id`. If the producer says the value changed,
  // the Recv makes a RecvTensor request of the fields in `fallback`
  // (shared by the step's Recvs), its key and its id. `landing`
  // (RendezvousArgs::landing, may be null) is the destination when it has
  // the value's size. Start() the call once it is hooked (Abort may come
  // from then on); it owns itself until `done`. A call that reads `ahead`
  // (control/read_ahead.h) ends NotServedAhead() where another would take
  // RecvTensor for the key's next value.
  std::shared_ptr<FastRecvCall> NewRecv(std::shared_ptr<WorkerClient> worker, int64_t step_id,
                                        std::string key, KnownFastKey known,
                                        std::shared_ptr<const RecvTensorRequest> fallback,
                                        int64_t request_id, std::shared_ptr<Buffer> landing,
                                        Detach detach, Done done, bool ahead = false);
  // Starts `calls` (one or more, of one key, each hooked as Start() asks)
  // and sends their requests to the producer in as few messages as its
  // transport carries, in order. A batch that does not go fails its calls.
  void StartAll(const std::vector<std::shared_ptr<FastRecvCall>>& calls);

  // Withdrawals that found no waiting request are remembered, up to this
  // many, so that a request overtaken by its withdrawal is refused.
  static constexpr size_t kMaxEarlyWithdrawals = 4096;
  // Requests waiting for their values at once, from all consumers.
  static constexpr size_t kMaxWaitingRequests = 4096;

  // Messages that arrived and were dropped: malformed, or naming an id or
  // a request this worker does not know.
  int64_t refused() const { return refused_.load(); }
  // Fast Recvs this worker started (read-ahead included), and requests it
  // answered.
  int64_t recvs_started() const { return recvs_started_.load(); }
  // Values this worker asked for ahead of their Recvs.
  int64_t read_ahead() const { return read_ahead_.load(); }
  int64_t requests_served() const { return requests_served_.load(); }
  // Messages this worker sent that carried requests (a batch counts once).
  int64_t request_messages() const { return waiting_->request_messages.load(); }
  // Requests past kMaxWaitingRequests, sent to RecvTensor.
  int64_t requests_overflowed() const { return requests_overflowed_.load(); }
  // Values this worker held for its consumers to read (design D).
  int64_t values_lent() const { return values_lent_.load(); }
  // This worker's fast Recvs that the producer sent to RecvTensor.
  int64_t recvs_fetched_by_recv_tensor() const {
    return waiting_->fetched_by_recv_tensor.load();
  }
  // This worker's fast Recvs whose value changed dtype or shape, and which
  // asked for it again with the new one.
  int64_t recvs_asked_again() const { return waiting_->asked_again.load(); }
  // The nine above as GetStats counters (rdv_fast_path_*).
  void AppendStats(GetStatsResponse* response) const;

 private:
  // On the transport's progress thread.
  void OnMessage(absl::string_view message);
  void OnRequest(const FastRequest& request);
  // Sends `requests` (encoded) to `producer` as one batch; its failure
  // fails `calls`.
  void SendBatch(const std::string& producer, std::vector<std::string> requests,
                 std::vector<std::shared_ptr<FastRecvCall>> calls);
  void OnWithdrawal(const FastWithdrawal& withdrawal);
  void OnNotice(const FastNotice& notice);
  void OnRelease(const FastRelease& release);
  // A request waiting for its value at the producer, by (key id, step,
  // request id): the id makes a withdrawal the key's consumer's only.
  using ServedId = std::tuple<uint64_t, int64_t, uint64_t>;
  struct ServedRequest {
    CancellationManager cancel;  // withdraws the wait
    std::atomic<bool> withdrawn{false};
  };
  // Registers the request's wait; null when it was withdrawn before it
  // came, is a repeat of one waiting, or too many wait (each answered).
  std::shared_ptr<ServedRequest> StartServing(const FastRequest& request,
                                              const std::string& consumer_address);
  void StopServing(const ServedId& id);
  // A held request: answers it with the value its reshaped notice held,
  // which is the consumer's to take once.
  void ServeHeld(const FastRequest& request, const FastKeyIds::Entry& entry,
                 const ParsedKey& key);
  void RememberEarlyWithdrawal(const ServedId& id);
  // The producer's part once the step has the value.
  void Answer(const FastRequest& request, const FastKeyIds::Entry& entry, const ParsedKey& key,
              const absl::Status& status, const Tensor& value, bool is_dead, bool withdrawn);
  // Sends `notice` to the consumer; what ends after the FastPath (a tagged
  // send's failure) may call it too.
  static void Notify(DataPlane* data_plane, const std::string& consumer_address,
                     FastNotice notice);
  // Design B: writes `value` into the destination the request names, then
  // sends the consumer a landed notice (or a failed one).
  void Write(const FastRequest& request, const std::string& consumer_address,
             const Tensor& value, const ConsumerWatcher& consumer);
  // Design D: holds `value` for the consumer and tells it where to read
  // it; the consumer's release (or the step's cleanup) lets it go.
  void Lend(const FastRequest& request, const FastKeyIds::Entry& entry, const ParsedKey& key,
            const Tensor& value, const ConsumerWatcher& consumer);
  // The notice that tells request `request_id` its value is `value`'s
  // dtype and shape, held for the held request that asks for it so.
  static FastNotice Reshaped(uint64_t request_id, const Tensor& value);
  // The notice that fails request `request_id` with `status`, from the
  // producer's `what`.
  static FastNotice Failed(uint64_t request_id, absl::string_view what,
                           const absl::Status& status);
  // A completion that sends the consumer Failed(request_id, what, status)
  // when `status` is an error; `what` is a literal, as it outlives the call.
  static plugin::TransportDone NotifyIfFailed(DataPlane* data_plane,
                                              const std::string& consumer_address,
                                              uint64_t request_id, const char* what);
  void Refuse(const absl::Status& why);

  const WorkerEnv& env_;
  RendezvousMgr& rendezvous_mgr_;
  TensorService& tensors_;
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> recvs_started_{0};
  std::atomic<int64_t> read_ahead_{0};
  std::atomic<int64_t> requests_served_{0};
  std::atomic<int64_t> requests_overflowed_{0};
  std::atomic<int64_t> values_lent_{0};
  const std::shared_ptr<FastWaiting> waiting_ = std::make_shared<FastWaiting>();
  std::mutex serving_mu_;
  absl::flat_hash_map<ServedId, std::shared_ptr<ServedRequest>> serving_;  // serving_mu_
  absl::flat_hash_set<ServedId> early_withdrawals_;                        // serving_mu_
  std::deque<ServedId> early_withdrawal_order_;  // serving_mu_: oldest first
};

// How a producer has a key's values come by the fast path
// (TensorMeta.fast_path_put and fast_path_get), for a value that is `lent`
// (op get: it lies in memory the consumer reads by a copy of its own):
// written into the request's destination (`put`, design B), held to be
// read (`get`, design D), or else sent tagged (design A).
struct FastWays {
  bool put = false;
  bool get = false;
};
FastWays FastWaysFor(const DataPlane& plane, const ControlOptions& options, bool lent);

// One fast-path Recv (the consumer's side).
class FastRecvCall final : public AbortableCall,
                           public std::enable_shared_from_this<FastRecvCall> {
 public:
  FastRecvCall(DataPlane* data_plane, std::shared_ptr<FastWaiting> waiting,
               std::shared_ptr<WorkerClient> worker, int64_t step_id, std::string key,
               KnownFastKey known, std::shared_ptr<const RecvTensorRequest> fallback,
               int64_t request_id, std::shared_ptr<Buffer> landing,
               FastPath::Detach detach, FastPath::Done done, bool ahead);

  // Posts the receive and sends the request.
  void Start();
  // Posts the receive and returns the request, for the caller to send
  // (FastPath::StartAll); nullopt when the call ended, or took RecvTensor,
  // instead.
  std::optional<std::string> Prepare();
  // The end of a message to the producer that did not go: the Recv fails
  // UNAVAILABLE, naming `what` (nothing when `sent` is OK).
  void NotSent(const absl::Status& sent, absl::string_view what);
  const std::string& producer_address() const { return *known_.producer_transport_address; }
  // Ends the Recv with `status` without asking the producer (Abort, but
  // never by a withdrawal).
  void End(const absl::Status& status);
  // Safe under the caller's locks: nothing here finishes the Recv. A
  // read-ahead whose request went is withdrawn as by Cancel, and ends with
  // `status` once the producer answers (or with the value it took).
  void Abort(const absl::Status& status) override;
  // Withdraws the request at the producer; the Recv ends with `status` once
  // the producer says it took no value for it, or with the value it took.
  // A held request is not withdrawn: its value was taken, and comes at once.
  // Safe under the caller's locks.
  void Cancel(const absl::Status& status) override;
  // The producer's notice (on the progress thread). FAILED_PRECONDITION for
  // a notice this Recv cannot take, which the caller counts as refused.
  absl::Status Told(const FastNotice& notice);
  // Design D: reads the value the readable notice names into the
  // destination, releases it at the producer, and ends the transfer.
  // FAILED_PRECONDITION when this Recv reads nothing (now).
  absl::Status Read(const FastNotice& notice);

 private:
  // What the Recv does when its transfer ends without the value, as the
  // producer's last notice said.
  enum class AfterNotice {
    kEnd,        // ends with the transfer's status (or the notice's)
    kDead,       // ends with is_dead
    kFetchHeld,  // a RecvTensor call fetches the value held for it
    kFetchNext,  // a RecvTensor call fetches the key's next value
    kAskAgain,   // asks for the held value again with its own dtype and shape
  };
  // `can_ask_again`: a reshaped notice this Recv can ask again after (it
  // did not already, and the notice's metadata is sound).
  static AfterNotice AfterNoticeOf(FastNoticeKind kind, bool can_ask_again);
  // A value's dtype and shape, as a reshaped notice gives them.
  struct Metadata {
    DType dtype = DType::kInvalid;
    TensorShape shape;
  };
  // The notice's metadata, checked: INVALID_ARGUMENT for a dtype the fast
  // path does not carry or an impossible shape.
  static absl::StatusOr<Metadata> MetadataOf(const FastNotice& notice);
  // After a reshaped notice: asks for the held value again, with its own
  // dtype and shape, which the key's later Recvs take too.
  void AskAgain(Metadata metadata);
  bool AsksForHeldValue();
  // The request for the destination; `put_key` reaches it (design B).
  FastRequest RequestFor(std::string put_key, bool held) const;
  // Sends the producer `message`; a transport that cannot reach it aborts
  // the Recv (nothing can come from it either).
  void SendToProducer(std::string message, absl::string_view what);
  void TransferDone(absl::Status status);
  void Complete(absl::Status status, Tensor tensor, bool is_dead);
  // A RecvTensor call brings the value: the one held for this Recv when it
  // changed (`held`), or the key's next, as for a new key.
  void FetchBySlowPath(bool held);

  void Unregister();

  DataPlane* const data_plane_;  // outlives every worker's call
  const std::shared_ptr<FastWaiting> waiting_;
  std::shared_ptr<WorkerClient> worker_;
  const int64_t step_id_;
  const std::string key_;
  // Its dtype and shape change on a reshaped notice, on the thread that
  // asks again; the rest never does.
  KnownFastKey known_;
  const std::shared_ptr<const RecvTensorRequest> fallback_;
  const std::shared_ptr<Buffer> landing_;
  FastPath::Detach detach_;
  FastPath::Done done_;
  const uint64_t request_id_;
  const bool ahead_;  // a read-ahead: never falls back to the key's next value
  const std::string worker_name_;  // the producer's, for errors
  Tensor destination_;
  std::mutex mu_;
  std::shared_ptr<SideTransfer> transfer_;  // mu_
  absl::Status ended_by_;                   // mu_: abort, or a failed notice
  absl::Status cancelled_;                  // mu_: the first Cancel's status
  bool requested_ = false;                  // mu_: the request is on its way
  AfterNotice after_notice_ = AfterNotice::kEnd;  // mu_: from the last notice
  Metadata reshaped_;                       // mu_: with AfterNotice::kAskAgain
  bool held_ = false;                       // mu_: asks for a held value
  RecvTensorCall* slow_call_ = nullptr;     // mu_: the RecvTensor it took
  // The destination as the producer may write it (design B), until the
  // transfer ends.
  std::unique_ptr<plugin::TransportMemory> exposed_;  // mu_
  // The destination design D reads into, until the readable notice.
  std::optional<Tensor> read_into_;  // mu_
};

}  // namespace rdv::control
