// The rdv backend of torch.distributed: each rank runs an rdv worker (job
// "torch", task = rank) and moves point-to-point tensors through it, over
// the protocol RDV_PROTOCOL names. Ranks find each other through the store
// torch hands every backend; no cluster spec is needed.
//
// Keys: every send from rank a to rank b with tag t is key
// "/job:torch/.../task:a/...;<a's incarnation>;.../task:b/...;tag<t>;0:0"
// on the step of that direction (a to b): the key's FIFO matches sends
// and recvs in program order (pytorch/recv_channels.h), and a recurring
// key is what rdv's fast path serves without a gRPC call. A peer that dies (or
// destroys its group) stops only its pair: the Works with that peer fail,
// the others go on.
//
// Threads: torch calls from any thread; nothing here blocks except Create
// (the store), barrier's wait and the destructor (at most the peer timeout,
// to say goodbye).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "core/notification.h"
#include "core/rendezvous.h"
#include "core/rendezvous_key.h"
#include "core/split_copy.h"
#include "core/status.h"
#include "pytorch/pair_states.h"
#include "pytorch/recv_channels.h"
#include "pytorch/work.h"

namespace rdv::control {
class WorkerServer;
}

namespace rdv::pytorch {

class ProcessGroupRdv final : public c10d::ProcessGroup {
 public:
  // Starts this rank's worker, publishes its address in `store` and waits
  // (at most `timeout`) for every other rank's. Throws std::runtime_error
  // with rdv's message on failure.
  static c10::intrusive_ptr<ProcessGroupRdv> Create(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);
  // Says goodbye to every peer still there (so they do not take this for a
  // death), then stops the worker: sends nobody received fail.
  ~ProcessGroupRdv() override;

  // Runs `body` with the embedding runtime's lock let go. The Python
  // module sets one that releases the GIL: the destructor waits for rdv's
  // threads, and those may need the GIL to drop a torch tensor.
  using BlockingSection = void (*)(absl::FunctionRef<void()> body);
  static void SetBlockingSection(BlockingSection section);

  const std::string getBackendName() const override { return "rdv"; }
  // The worker's host:port and protocol, for logs and tests.
  const std::string& address() const;
  const std::string& protocol() const { return protocol_; }
  // What this rank's worker moved, in Prometheus' text format
  // (docs/stats.md).
  std::string stats() const;

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>&,
                                           const c10d::BroadcastOptions&) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&,
                                           const c10d::AllreduceOptions&) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>&, const c10d::AllreduceCoalescedOptions&) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>&,
                                        const c10d::ReduceOptions&) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>&,
                                           std::vector<at::Tensor>&,
                                           const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor&, at::Tensor&,
                                                 const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>&,
                                                     std::vector<at::Tensor>&,
                                                     const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>&,
                                        std::vector<at::Tensor>&,
                                        const c10d::GatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>&,
                                         std::vector<std::vector<at::Tensor>>&,
                                         const c10d::ScatterOptions&) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>&,
                                                std::vector<std::vector<at::Tensor>>&,
                                                const c10d::ReduceScatterOptions&) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor&, at::Tensor&,
                                                      const c10d::ReduceScatterOptions&) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor&, at::Tensor&, std::vector<int64_t>&,
                                               std::vector<int64_t>&,
                                               const c10d::AllToAllOptions&) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>&, std::vector<at::Tensor>&,
                                          const c10d::AllToAllOptions&) override;

  // Use Create (public for c10::make_intrusive only).
  ProcessGroupRdv(int rank, int size, std::chrono::milliseconds timeout,
                  std::unique_ptr<control::WorkerServer> server, std::string protocol,
                  absl::Duration peer_timeout);

 private:
  struct Peer {
    std::string device;  // "/job:torch/replica:0/task:N/device:CPU:0"
    uint64_t incarnation = 0;
  };
  // A watch: a Recv of the peer's goodbye, posted at start. It fails when
  // the peer dies (rdv notices within RDV_PEER_TIMEOUT_MS) and succeeds
  // when the peer destroys its group; either way the pair stops
  // (pytorch/pair_states.h has the closing handshake).
  struct Watch {
    CancellationManager cancellation;
    Notification done;
  };

  void Bootstrap(c10d::Store& store);
  void StartPairs();
  void WatchPeers();
  void Watched(int peer, const absl::Status& status, const Tensor& goodbye);
  void SayGoodbye();
  // The destructor's work: goodbyes, then the worker stops.
  void Close();

  // The step of the values `src` sends `dst`: one per direction, so that a
  // pair can stop one way and not the other.
  std::shared_ptr<Rendezvous> Direction(int src, int dst) const;
  // The step of goodbyes and farewells, which stopping a pair leaves alone.
  std::shared_ptr<Rendezvous> Closing() const;
  ParsedKey KeyFrom(int src, int dst, const std::string& name, int64_t sequence) const;
  void CheckPeer(int peer, const char* role) const;
  c10::intrusive_ptr<Work> Send(const at::Tensor& tensor, int dst, const ParsedKey& key,
                                std::string what);
  c10::intrusive_ptr<Work> Recv(at::Tensor tensor, int src, int tag, std::string what);
  void StopPair(int peer, const absl::Status& why, bool died);
  [[noreturn]] void Unsupported(const char* operation) const;

  const std::chrono::milliseconds timeout_;
  const std::string protocol_;
  const absl::Duration peer_timeout_;
  std::unique_ptr<control::WorkerServer> server_;
  std::shared_ptr<PairStates> pairs_;
  const std::shared_ptr<RecvChannels> channels_ = std::make_shared<RecvChannels>();
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<Watch>> watches_;
  std::atomic<int64_t> barriers_{0};  // barriers started
  SplitCopier copier_;  // stages sends (StageForSend)
};

}  // namespace rdv::pytorch
