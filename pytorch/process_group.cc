#include "pytorch/process_group.h"

#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "control/cluster.h"
#include "control/worker_server.h"
#include "core/environment.h"
#include "core/logging.h"
#include "core/rendezvous.h"
#include "pytorch/process_group_common.h"
#include "pytorch/tensors.h"

namespace rdv::pytorch {

namespace {

constexpr char kJob[] = "torch";
constexpr char kBarrier[] = "rdv_barrier";

std::string StoreKey(int rank) { return absl::StrCat("rdv/worker/", rank); }

std::string DeviceOf(int rank) {
  return absl::StrCat(control::ClusterSpec::WorkerName(kJob, rank), "/device:CPU:0");
}

// Peers dial the address a rank publishes: a wildcard host would send
// them nowhere.
absl::Status CheckListenAddress(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RDV_LISTEN_ADDRESS='", address,
        "': name this host's address on the network the other ranks reach (its port may be 0); "
        "it is what they dial"));
  }
  return absl::OkStatus();
}

// `default_protocol`: RDV_PROTOCOL was unset.
absl::StatusOr<control::WorkerServerOptions> OptionsFor(int rank, bool* default_protocol) {
  RDV_ASSIGN_OR_RETURN(control::WorkerServerOptions options,
                       control::WorkerServerOptions::FromEnvironment());
  options.job = kJob;
  options.task = rank;
  options.protocol.clear();
  env::ReadText("RDV_PROTOCOL", &options.protocol);
  *default_protocol = options.protocol.empty();
  // The data plane by default: over `grpc` alone a send costs gRPC calls,
  // several times slower than gloo at every size (docs/torch.md).
  if (*default_protocol) options.protocol = "grpc+ucx";
  env::ReadText("RDV_LISTEN_ADDRESS", &options.listen_address);
  RDV_RETURN_IF_ERROR(CheckListenAddress(options.listen_address));
  return options;
}

// A Recv that failed after its pair stopped fails for the pair's reason.
absl::Status BecauseOfPair(const absl::Status& pair, const absl::Status& failure) {
  if (failure.ok() || pair.ok()) return failure;
  return absl::Status(pair.code(), absl::StrCat(pair.message(), " (", failure.ToString(), ")"));
}

void CheckTensor(const std::vector<at::Tensor>& tensors, const char* operation) {
  if (tensors.size() != 1) {
    Throw(absl::InvalidArgumentError(absl::StrCat(operation, " takes one tensor, not ",
                                                  tensors.size())));
  }
  const at::Tensor& tensor = tensors[0];
  if (!tensor.device().is_cpu() || tensor.layout() != at::kStrided) {
    Throw(absl::InvalidArgumentError(absl::StrCat(
        operation, " moves dense CPU tensors; this one is ", tensor.toString(),
        " (copy it with .cpu() / .to_dense())")));
  }
}

}  // namespace

c10::intrusive_ptr<ProcessGroupRdv> ProcessGroupRdv::Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    Throw(absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of a group of ", size)));
  }
  bool default_protocol = false;
  auto options = OptionsFor(rank, &default_protocol);
  if (!options.ok()) Throw(options.status());
  const std::string protocol = options->protocol;
  const absl::Duration peer_timeout = options->control.peer_timeout;
  auto server = control::WorkerServer::Start(*std::move(options));
  if (!server.ok()) {
    // Where the user chose nothing, say how to choose.
    const char* hint =
        default_protocol ? ", the default; RDV_PROTOCOL=grpc needs no data plane" : "";
    Throw(absl::Status(server.status().code(),
                       absl::StrCat("rank ", rank, " could not start its worker (RDV_PROTOCOL=",
                                    protocol, hint, "): ", server.status().message())));
  }
  c10::intrusive_ptr<ProcessGroupRdv> group = c10::make_intrusive<ProcessGroupRdv>(
      rank, size, timeout, *std::move(server), protocol, peer_timeout);
  group->Bootstrap(*store);
  group->StartPairs();
  group->WatchPeers();
  RDV_LOG(Info) << "torch rank " << rank << " of " << size << ": rdv worker at "
                << group->address() << ", protocol " << protocol << ", fast path "
                << (group->server_->fast_path() != nullptr ? "on" : "off");
  return group;
}

ProcessGroupRdv::ProcessGroupRdv(int rank, int size, std::chrono::milliseconds timeout,
                                 std::unique_ptr<control::WorkerServer> server,
                                 std::string protocol, absl::Duration peer_timeout)
    : ProcessGroup(rank, size),
      timeout_(timeout),
      protocol_(std::move(protocol)),
      peer_timeout_(peer_timeout),
      server_(std::move(server)),
      peers_(static_cast<size_t>(size)) {}

const std::string& ProcessGroupRdv::address() const { return server_->address(); }

std::string ProcessGroupRdv::stats() const { return server_->StatsAsPrometheus(); }

void ProcessGroupRdv::Bootstrap(c10d::Store& store) {
  const std::string mine = absl::StrCat(server_->address(), " ", server_->incarnation());
  store.set(StoreKey(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
  for (int peer = 0; peer < size_; ++peer) {
    peers_[peer].device = DeviceOf(peer);
    if (peer == rank_) {
      peers_[peer].incarnation = server_->incarnation();
      continue;
    }
    try {
      store.wait({StoreKey(peer)}, timeout_);
    } catch (const std::exception& e) {
      Throw(absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank_, " waited ", timeout_.count(), " ms for rank ", peer,
          " to publish its worker's address in the store (", e.what(), ")")));
    }
    const std::vector<uint8_t> value = store.get(StoreKey(peer));
    const std::vector<std::string> parts =
        absl::StrSplit(std::string(value.begin(), value.end()), ' ');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &peers_[peer].incarnation)) {
      Throw(absl::InvalidArgumentError(absl::StrCat(
          "rank ", peer, "'s entry in the store is not '<host:port> <incarnation>'")));
    }
    server_->SetPeerAddress(kJob, peer, parts[0]);
  }
}

std::shared_ptr<Rendezvous> ProcessGroupRdv::Direction(int src, int dst) const {
  return server_->rendezvous_mgr().Find(1 + static_cast<int64_t>(src) * size_ + dst);
}

ParsedKey ProcessGroupRdv::KeyFrom(int src, int dst, const std::string& name,
                                   int64_t sequence) const {
  return ValueOrThrow(ParsedKey::Parse(CreateRendezvousKey(
      peers_[src].device, peers_[src].incarnation, peers_[dst].device, name, {0, sequence})));
}

void ProcessGroupRdv::CheckPeer(int peer, const char* role) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    Throw(absl::InvalidArgumentError(absl::StrCat(
        role, " rank ", peer, " is not another rank of this group (rank ", rank_, " of ", size_,
        ")")));
  }
}

c10::intrusive_ptr<Work> ProcessGroupRdv::Send(const at::Tensor& tensor, int dst,
                                               const ParsedKey& key, std::string what) {
  auto work = c10::make_intrusive<Work>(rank_, c10d::OpType::SEND, std::vector<at::Tensor>{tensor},
                                        std::move(what), timeout_);
  std::optional<Tensor> staging = ValueOrThrow(StageForSend(tensor, *server_, copier_));
  // A staged send's bytes are rdv's copy, so it completes once they are
  // handed over, while what is staged ahead for `dst` fits the pair's bound.
  // Any other send completes when rdv lets go of its bytes: the receiver has
  // them, or the pair stopped and they were dropped.
  const size_t bytes = tensor.nbytes();
  const bool ahead = staging.has_value() && pairs_->StageAhead(dst, bytes);
  absl::AnyInvocable<void() &&> released = [work, pairs = pairs_, dst] {
    work->Complete(pairs->OfRelease(dst));
  };
  if (ahead) released = [pairs = pairs_, dst, bytes] { pairs->StagedReleased(dst, bytes); };
  Tensor value = ValueOrThrow(staging.has_value()
                                  ? HoldUntilReleased(*std::move(staging), std::move(released))
                                  : WrapForSend(tensor.contiguous(), std::move(released)));
  const absl::Status sent = Direction(rank_, dst)->Send(key, {}, value, false);
  if (!sent.ok()) {
    work->Complete(sent);
    return work;
  }
  pairs_->Sent(dst);
  if (ahead) work->Complete(absl::OkStatus());
  return work;
}

c10::intrusive_ptr<Work> ProcessGroupRdv::Recv(at::Tensor tensor, int src, int tag,
                                               std::string what) {
  auto work = c10::make_intrusive<Work>(rank_, c10d::OpType::RECV, std::vector<at::Tensor>{tensor},
                                        std::move(what), timeout_, src);
  // Posted from an rdv thread when an earlier Recv of the channel is in
  // rdv: it holds no rendezvous, which such a thread must never destroy.
  auto post = [work, tensor, src, key = KeyFrom(src, rank_, absl::StrCat("tag", tag), 0),
               direction = std::weak_ptr<Rendezvous>(Direction(src, rank_)),
               pairs = pairs_](std::function<void()> ended) mutable {
    const std::shared_ptr<Rendezvous> rendezvous = direction.lock();
    if (rendezvous == nullptr) {
      work->Complete(absl::CancelledError("the process group was destroyed"));
      return ended();
    }
    RendezvousArgs args = HostArgs(&work->cancellation());
    args.landing = LandingOf(tensor);
    rendezvous->RecvAsync(
        key, args,
        [work, tensor, pairs, src, ended = std::move(ended)](
            const absl::Status& status, const RendezvousArgs&, const RendezvousArgs&,
            const Tensor& value, bool is_dead) mutable {
          if (!status.ok()) {
            work->Complete(BecauseOfPair(pairs->Of(src), status));
          } else {
            pairs->Taken(src);
            work->Complete(is_dead ? absl::DataLossError("the sender sent a dead tensor")
                                   : CopyReceived(value, tensor));
          }
          ended();
        });
  };
  channels_->Enqueue(src, tag, std::move(post),
                     [work](const absl::Status& why) { work->Complete(why); });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::send(std::vector<at::Tensor>& tensors,
                                                     int dst_rank, int tag) {
  CheckTensor(tensors, "send");
  CheckPeer(dst_rank, "send: destination");
  return Send(tensors[0], dst_rank, KeyFrom(rank_, dst_rank, absl::StrCat("tag", tag), 0),
              absl::StrCat("send of tag ", tag, " to rank ", dst_rank));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::recv(std::vector<at::Tensor>& tensors,
                                                     int src_rank, int tag) {
  CheckTensor(tensors, "recv");
  CheckPeer(src_rank, "recv: source");
  return Recv(tensors[0], src_rank, tag, absl::StrCat("recv of tag ", tag, " from rank ", src_rank));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::recvAnysource(std::vector<at::Tensor>&, int) {
  Throw(absl::UnimplementedError(
      "recv from any source: an rdv key names its producer, so recv needs src=<rank>; "
      "the gloo backend receives from any source"));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdv::barrier(const c10d::BarrierOptions&) {
  const int64_t sequence = barriers_.fetch_add(1);
  auto work = c10::make_intrusive<Work>(rank_, c10d::OpType::BARRIER, std::vector<at::Tensor>{},
                                        absl::StrCat("barrier ", sequence), timeout_);
  if (size_ == 1) {
    work->Complete(absl::OkStatus());
    return work;
  }
  if (rank_ != 0) {
    const absl::Status sent =
        Direction(rank_, 0)->Send(KeyFrom(rank_, 0, kBarrier, sequence), {}, Signal(), false);
    if (!sent.ok()) {
      work->Complete(sent);
      return work;
    }
    pairs_->Sent(0);
    Direction(0, rank_)->RecvAsync(
        KeyFrom(0, rank_, kBarrier, sequence), HostArgs(nullptr),
        [work, pairs = pairs_](const absl::Status& status, const RendezvousArgs&,
                               const RendezvousArgs&, const Tensor&, bool) {
          if (status.ok()) pairs->Taken(0);
          work->Complete(BecauseOfPair(pairs->Of(0), status));
        });
    return work;
  }
  // Rank 0 hears from every rank, then releases them all.
  struct Release {
    int peer;
    std::shared_ptr<Rendezvous> rendezvous;
    ParsedKey key;
  };
  struct Arrivals {
    std::mutex mu;
    int waiting;
    absl::Status status;
    std::vector<Release> releases;
  };
  auto arrivals = std::make_shared<Arrivals>();
  arrivals->waiting = size_ - 1;
  for (int peer = 1; peer < size_; ++peer) {
    arrivals->releases.push_back({peer, Direction(0, peer), KeyFrom(0, peer, kBarrier, sequence)});
  }
  for (int peer = 1; peer < size_; ++peer) {
    Direction(peer, 0)->RecvAsync(
        KeyFrom(peer, 0, kBarrier, sequence), HostArgs(nullptr),
        [work, arrivals, pairs = pairs_, peer](const absl::Status& status, const RendezvousArgs&,
                                               const RendezvousArgs&, const Tensor&, bool) {
          if (status.ok()) pairs->Taken(peer);
          {
            std::lock_guard lock(arrivals->mu);
            arrivals->status.Update(BecauseOfPair(pairs->Of(peer), status));
            if (--arrivals->waiting > 0) return;
          }
          for (const Release& release : arrivals->releases) {
            const absl::Status sent = release.rendezvous->Send(release.key, {}, Signal(), false);
            if (sent.ok()) pairs->Sent(release.peer);
            arrivals->status.Update(sent);
          }
          work->Complete(arrivals->status);
        });
  }
  return work;
}

}  // namespace rdv::pytorch
