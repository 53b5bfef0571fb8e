// Runs one partition of a graph for a step. A node runs once all of its
// inputs (data and control) are done. _Send and _HostSend are synchronous:
// they Send into the step's rendezvous and finish. _Recv and _HostRecv are
// asynchronous: the executor keeps running other nodes while they wait and
// their successors run on the thread that completes the Recv. Other nodes
// run their CPU kernel (graph/kernels.h) on the thread that made them
// ready. A node on a GPU device runs the same kernel on host copies of its
// inputs and its output is copied back to that GPU by DMA (int32 outputs
// stay in host memory, as in TensorFlow), asynchronously like a Recv:
// correct, not fast; without a GPU it fails FAILED_PRECONDITION. A dead
// input (is_dead from a Recv) makes every output dead without running the
// kernel, as in TensorFlow.
//
// Errors: the first failure (a kernel, a Send, a Recv) is the step's root
// cause. The executor aborts the step's rendezvous with it once, which
// fails its pending Recvs (and, through a remote rendezvous, the step on
// other workers), stops scheduling new nodes, and reports it when every
// Recv in flight has come back. Nothing waits unbounded: a Recv waits until
// its value arrives or the rendezvous is aborted (cleaned up, timed out by
// the caller).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "core/rendezvous.h"
#include "graph/graph.h"

namespace rdv::graph {

class Executor {
 public:
  // Validates the partition and builds every _Send/_Recv key once.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(GraphDef partition);
  ~Executor();

  // status, then the fetched tensors in the order asked for.
  using DoneCallback = absl::AnyInvocable<void(absl::Status, std::vector<Tensor>) &&>;

  // "node:slot" (or "node" for slot 0) and a host tensor of the output's
  // dtype, used instead of running the node (whose inputs are then not
  // waited for).
  using Feeds = std::vector<std::pair<std::string, Tensor>>;

  // Runs the partition once against `rendezvous` (not owned; it must
  // outlive the run) and returns at once. `fetches` name outputs as
  // "node:slot" (or "node" for slot 0). `done` runs exactly once, on the
  // thread that finishes the run: this one, or a Recv's completion thread.
  // Several runs (steps) of one executor may overlap; the executor must
  // outlive them.
  void RunAsync(Rendezvous* rendezvous, const Feeds& feeds,
                const std::vector<std::string>& fetches, DoneCallback done) const;

  // RunAsync, waiting at most `timeout`; on DEADLINE_EXCEEDED the step's
  // rendezvous is aborted and the run is waited for, so nothing refers to
  // the caller afterwards.
  absl::Status Run(Rendezvous* rendezvous, const Feeds& feeds,
                   const std::vector<std::string>& fetches, std::vector<Tensor>* fetched,
                   absl::Duration timeout) const;

  const Graph& graph() const;

  class Impl;  // opaque

 private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdv::graph
