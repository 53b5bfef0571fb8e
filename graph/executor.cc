#include "graph/executor.h"

#include <deque>
#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/device_copy.h"
#include "core/notification.h"
#include "graph/kernels.h"
#include "graph/ops.h"
#include "graph/partition.h"

namespace rdv::graph {
namespace {

struct Entry {
  Tensor tensor;
  bool is_dead = false;
};

// One output of one node: a fetch or a feed.
struct Fetch {
  int node = -1;
  int slot = 0;
};

struct Feed {
  Fetch output;
  Tensor value;
};

}  // namespace

class Executor::Impl {
 public:
  explicit Impl(Graph graph) : graph_(std::move(graph)) {}

  absl::Status Prepare() {
    consumers_.resize(graph_.num_nodes());
    keys_.resize(graph_.num_nodes());
    for (int i = 0; i < graph_.num_nodes(); ++i) {
      for (const Input& input : graph_.inputs(i)) consumers_[input.node].push_back(i);
      const NodeDef& node = graph_.node(i);
      if (!IsSend(node.op()) && !IsRecv(node.op())) continue;
      RDV_ASSIGN_OR_RETURN(const std::string key, SendRecvKey(node));
      absl::StatusOr<ParsedKey> parsed = ParsedKey::Parse(key);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(NodeContext(node), parsed.status().message()));
      }
      keys_[i] = *std::move(parsed);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Fetch>> ResolveFetches(const std::vector<std::string>& names) const {
    std::vector<Fetch> fetches;
    for (const std::string& name : names) {
      RDV_ASSIGN_OR_RETURN(Fetch fetch, Resolve("fetch", name));
      fetches.push_back(fetch);
    }
    return fetches;
  }

  absl::StatusOr<std::vector<Feed>> ResolveFeeds(const Executor::Feeds& feeds) const {
    std::vector<Feed> resolved;
    for (const auto& [name, value] : feeds) {
      RDV_ASSIGN_OR_RETURN(Fetch output, Resolve("feed", name));
      const DType want = graph_.output_type(output.node, output.slot);
      if (value.dtype() != want || !value.location().is_host()) {
        return absl::InvalidArgumentError(absl::StrCat("feed '", name, "': ", value.DebugString(),
                                                       " given, the output is ", DTypeName(want),
                                                       " (host memory)"));
      }
      resolved.push_back({output, value});
    }
    return resolved;
  }

 private:
  absl::StatusOr<Fetch> Resolve(absl::string_view what, const std::string& name) const {
    Fetch fetch;
    absl::string_view node_name = name;
    if (const size_t colon = node_name.rfind(':'); colon != absl::string_view::npos) {
      if (!absl::SimpleAtoi(node_name.substr(colon + 1), &fetch.slot)) {
        return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "': bad slot"));
      }
      node_name = node_name.substr(0, colon);
    }
    std::optional<int> node = graph_.FindNode(node_name);
    if (!node) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "': no node '", node_name,
                                                     "' in this partition"));
    }
    if (fetch.slot < 0 || fetch.slot >= graph_.num_outputs(*node)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "': node has ",
                                                     graph_.num_outputs(*node), " outputs"));
    }
    fetch.node = *node;
    return fetch;
  }

 public:

  const Graph& graph() const { return graph_; }
  const std::vector<int>& consumers(int node) const { return consumers_[node]; }
  const ParsedKey& key(int node) const { return *keys_[node]; }

 private:
  Graph graph_;
  std::vector<std::vector<int>> consumers_;
  std::vector<std::optional<ParsedKey>> keys_;
};

namespace {

// One step's run of a partition; shared by the callbacks of its Recvs.
class StepRun : public std::enable_shared_from_this<StepRun> {
 public:
  StepRun(const Executor::Impl& plan, Rendezvous* rendezvous, std::vector<Fetch> fetches,
          Executor::DoneCallback done)
      : plan_(plan),
        graph_(plan.graph()),
        rendezvous_(rendezvous),
        fetches_(std::move(fetches)),
        done_(std::move(done)),
        fed_(graph_.num_nodes(), false),
        pending_(graph_.num_nodes()),
        outputs_(graph_.num_nodes()),
        unfinished_(graph_.num_nodes()) {}

  void Start(const std::vector<Feed>& feeds) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < graph_.num_nodes(); ++i) {
        pending_[i] = static_cast<int>(graph_.inputs(i).size());
      }
      // A fed node is done from the start; it never runs.
      for (const Feed& feed : feeds) {
        outputs_[feed.output.node].resize(graph_.num_outputs(feed.output.node));
        outputs_[feed.output.node][feed.output.slot] = Entry{feed.value, false};
        if (fed_[feed.output.node]) continue;
        fed_[feed.output.node] = true;
        --unfinished_;
        for (int consumer : plan_.consumers(feed.output.node)) --pending_[consumer];
      }
      for (int i = 0; i < graph_.num_nodes(); ++i) {
        if (pending_[i] == 0 && !fed_[i]) ready_.push_back(i);
      }
    }
    Drain();
  }

 private:
  // Runs ready nodes until none is left; one thread at a time does.
  void Drain() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (draining_) return;
      draining_ = true;
    }
    for (;;) {
      int node;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status_.ok()) ready_.clear();
        if (ready_.empty()) {
          draining_ = false;
          break;
        }
        node = ready_.front();
        ready_.pop_front();
      }
      Process(node);
    }
    MaybeDone();
  }

  void Process(int node) {
    const NodeDef& def = graph_.node(node);
    std::vector<Tensor> inputs;
    bool is_dead = false;
    for (const Input& input : graph_.inputs(node)) {
      if (input.control) continue;
      const Entry& entry = outputs_[input.node][input.slot];
      inputs.push_back(entry.tensor);
      is_dead = is_dead || entry.is_dead;
    }
    if (IsRecv(def.op())) {
      StartRecv(node);
      return;
    }
    if (IsSend(def.op())) {
      RendezvousArgs args;
      args.alloc_attrs.on_host = def.op() == "_HostSend";
      Finish(node, {}, rendezvous_->Send(plan_.key(node), args, inputs[0], is_dead));
      return;
    }
    if (def.op() == "NoOp") {
      Finish(node, {}, absl::OkStatus());
      return;
    }
    if (is_dead) {
      Finish(node, std::vector<Entry>(graph_.num_outputs(node), Entry{Tensor(), true}),
             absl::OkStatus());
      return;
    }
    if (graph_.device(node).IsGpu()) {
      StartGpuNode(node, std::move(inputs));
      return;
    }
    absl::StatusOr<Tensor> output = RunCpuKernel(def, graph_.output_type(node, 0), inputs);
    if (!output.ok()) {
      Finish(node, {}, output.status());
      return;
    }
    Finish(node, {Entry{*std::move(output), false}}, absl::OkStatus());
  }

  void StartRecv(int node) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++recvs_in_flight_;
    }
    RendezvousArgs args;
    args.alloc_attrs.on_host = graph_.node(node).op() == "_HostRecv";
    rendezvous_->RecvAsync(
        plan_.key(node), args,
        [self = shared_from_this(), node](const absl::Status& status, const RendezvousArgs&,
                                          const RendezvousArgs&, const Tensor& value,
                                          bool is_dead) {
          {
            std::lock_guard<std::mutex> lock(self->mu_);
            --self->recvs_in_flight_;
          }
          self->Finish(node, {Entry{value, is_dead}}, status);
          self->Drain();
        });
  }

  // A node on a GPU: its inputs staged to host memory, the CPU kernel, the
  // output copied back to the GPU (int32 stays in host memory, as in
  // TensorFlow). Asynchronous, like a Recv: every copy completes on a CUDA
  // thread.
  void StartGpuNode(int node, std::vector<Tensor> inputs) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++recvs_in_flight_;
    }
    auto staged = std::make_shared<std::vector<Tensor>>(std::move(inputs));
    StageInput(node, staged, 0);
  }

  void StageInput(int node, std::shared_ptr<std::vector<Tensor>> inputs, size_t index) {
    if (index == inputs->size()) {
      ComputeOnHost(node, *inputs);
      return;
    }
    const Tensor input = (*inputs)[index];
    if (input.location().is_host()) {
      StageInput(node, std::move(inputs), index + 1);
      return;
    }
    CopyTensorAsync(input, MemoryLocation::Host(),
                    [self = shared_from_this(), node, inputs, index](absl::StatusOr<Tensor> host) {
                      if (!host.ok()) return self->FinishGpuNode(node, {}, host.status());
                      (*inputs)[index] = *std::move(host);
                      self->StageInput(node, inputs, index + 1);
                    });
  }

  void ComputeOnHost(int node, const std::vector<Tensor>& inputs) {
    const NodeDef& def = graph_.node(node);
    const DType dtype = graph_.output_type(node, 0);
    absl::StatusOr<Tensor> output = RunCpuKernel(def, dtype, inputs);
    if (!output.ok() || dtype == DType::kInt32) {
      return FinishGpuNode(node, output.ok() ? std::vector<Entry>{Entry{*output, false}}
                                             : std::vector<Entry>{},
                           output.status());
    }
    CopyTensorAsync(*output, MemoryLocation::Cuda(graph_.device(node).id),
                    [self = shared_from_this(), node, def](absl::StatusOr<Tensor> on_gpu) {
                      if (!on_gpu.ok()) {
                        return self->FinishGpuNode(
                            node, {},
                            absl::Status(on_gpu.status().code(),
                                         absl::StrCat(NodeContext(def), on_gpu.status().message())));
                      }
                      self->FinishGpuNode(node, {Entry{*std::move(on_gpu), false}},
                                          absl::OkStatus());
                    });
  }

  void FinishGpuNode(int node, std::vector<Entry> outputs, const absl::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --recvs_in_flight_;
    }
    Finish(node, std::move(outputs), status);
    Drain();
  }

  // Records a node's outputs (or its error) and readies its consumers.
  void Finish(int node, std::vector<Entry> outputs, const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    --unfinished_;
    if (!status.ok()) {
      // The first error is the root cause. The abort waits for MaybeDone:
      // StartAbort may complete Recvs on this thread, whose callbacks lock.
      if (status_.ok()) {
        status_ = status;
        abort_pending_ = true;
      }
      return;
    }
    outputs_[node] = std::move(outputs);
    for (int consumer : plan_.consumers(node)) {
      if (--pending_[consumer] == 0 && !fed_[consumer]) ready_.push_back(consumer);
    }
  }

  void MaybeDone() {
    Executor::DoneCallback done;
    absl::Status status;
    bool abort = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort = std::exchange(abort_pending_, false);
      status = status_;
    }
    // The root cause fails the step's other Recvs, here and on other workers.
    if (abort) rendezvous_->StartAbort(status);
    std::vector<Tensor> fetched;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool finished = unfinished_ == 0 || (!status_.ok() && recvs_in_flight_ == 0);
      if (!finished || draining_ || done_called_) return;
      done_called_ = true;
      done = std::move(done_);
      status = status_;
      if (status.ok()) status = CollectFetches(&fetched);
    }
    std::move(done)(status, std::move(fetched));
  }

  absl::Status CollectFetches(std::vector<Tensor>* fetched) const {
    for (const Fetch& fetch : fetches_) {
      const Entry& entry = outputs_[fetch.node][fetch.slot];
      if (entry.is_dead) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fetch '", graph_.node(fetch.node).name(), ":", fetch.slot, "' is dead"));
      }
      fetched->push_back(entry.tensor);
    }
    return absl::OkStatus();
  }

  const Executor::Impl& plan_;
  const Graph& graph_;
  Rendezvous* const rendezvous_;
  const std::vector<Fetch> fetches_;
  Executor::DoneCallback done_;
  std::vector<bool> fed_;  // set by Start, then only read

  std::mutex mu_;
  std::vector<int> pending_;                 // inputs not yet done, per node
  std::vector<std::vector<Entry>> outputs_;  // written once, before consumers run
  std::deque<int> ready_;
  bool draining_ = false;
  int unfinished_;
  int recvs_in_flight_ = 0;  // Recvs and GPU nodes not yet complete
  absl::Status status_;  // the root cause
  bool abort_pending_ = false;
  bool done_called_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(GraphDef partition) {
  RDV_ASSIGN_OR_RETURN(Graph graph, Graph::FromGraphDef(std::move(partition)));
  auto impl = std::make_unique<Impl>(std::move(graph));
  RDV_RETURN_IF_ERROR(impl->Prepare());
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

const Graph& Executor::graph() const { return impl_->graph(); }

void Executor::RunAsync(Rendezvous* rendezvous, const Feeds& feeds,
                        const std::vector<std::string>& fetches, DoneCallback done) const {
  absl::StatusOr<std::vector<Fetch>> resolved = impl_->ResolveFetches(fetches);
  absl::StatusOr<std::vector<Feed>> resolved_feeds = impl_->ResolveFeeds(feeds);
  if (!resolved.ok() || !resolved_feeds.ok()) {
    std::move(done)(resolved.ok() ? resolved_feeds.status() : resolved.status(), {});
    return;
  }
  std::make_shared<StepRun>(*impl_, rendezvous, *std::move(resolved), std::move(done))
      ->Start(*resolved_feeds);
}

absl::Status Executor::Run(Rendezvous* rendezvous, const Feeds& feeds,
                           const std::vector<std::string>& fetches, std::vector<Tensor>* fetched,
                           absl::Duration timeout) const {
  struct Result {
    Notification done;
    absl::Status status;
    std::vector<Tensor> tensors;
  };
  auto result = std::make_shared<Result>();
  RunAsync(rendezvous, feeds, fetches, [result](absl::Status status, std::vector<Tensor> tensors) {
    result->status = std::move(status);
    result->tensors = std::move(tensors);
    result->done.Notify();
  });
  if (!result->done.WaitForNotificationWithTimeout(timeout)) {
    rendezvous->StartAbort(absl::DeadlineExceededError(
        absl::StrCat("the step did not finish within ", absl::FormatDuration(timeout))));
    result->done.WaitForNotification();
  }
  *fetched = std::move(result->tensors);
  return result->status;
}

}  // namespace rdv::graph
