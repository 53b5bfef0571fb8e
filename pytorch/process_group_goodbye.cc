// How ranks part: each pair of ranks watches for the other's goodbye (or
// its loss), and a group that closes tells every peer how many values it
// sent, waits for them to be taken, then stops its worker.
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/worker_server.h"
#include "core/logging.h"
#include "pytorch/process_group.h"
#include "pytorch/process_group_common.h"
#include "pytorch/tensors.h"

namespace rdv::pytorch {
namespace {

constexpr char kGoodbye[] = "rdv_goodbye";
constexpr char kFarewell[] = "rdv_farewell";
constexpr int64_t kClosingStep = 0;

}  // namespace

std::shared_ptr<Rendezvous> ProcessGroupRdv::Closing() const {
  return server_->rendezvous_mgr().Find(kClosingStep);
}

// The farewells leave from rdv's threads, which may outlive the group: they
// hold what they need.
void ProcessGroupRdv::StartPairs() {
  std::vector<ParsedKey> farewells;
  for (int peer = 0; peer < size_; ++peer) farewells.push_back(KeyFrom(rank_, peer, kFarewell, 0));
  // A weak reference: the last owner of the states may be an rdv thread,
  // which must not be the one to destroy a rendezvous.
  pairs_ = std::make_shared<PairStates>(
      size_, [weak = std::weak_ptr<Rendezvous>(Closing()), farewells = std::move(farewells),
              rank = rank_](int peer) {
        const std::shared_ptr<Rendezvous> closing = weak.lock();
        if (closing == nullptr) return;
        const absl::Status sent = closing->Send(farewells[peer], {}, Signal(), false);
        if (!sent.ok()) {
          RDV_LOG(Warning) << "torch rank " << rank << ": the farewell to rank " << peer
                           << " failed: " << sent;
        }
      });
}

void ProcessGroupRdv::WatchPeers() {
  watches_.resize(static_cast<size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto watch = std::make_unique<Watch>();
    Watch* raw = watch.get();
    watches_[peer] = std::move(watch);
    Closing()->RecvAsync(KeyFrom(peer, rank_, kGoodbye, 0), HostArgs(&raw->cancellation),
                         [this, peer, raw](const absl::Status& status, const RendezvousArgs&,
                                           const RendezvousArgs&, const Tensor& goodbye, bool) {
                           if (!raw->cancellation.IsCancelled()) Watched(peer, status, goodbye);
                           raw->done.Notify();
                         });
  }
}

// A goodbye is one int64: how many values the peer sent this rank. It is
// checked like anything else a peer sends.
void ProcessGroupRdv::Watched(int peer, const absl::Status& status, const Tensor& goodbye) {
  if (!status.ok()) {
    StopPair(peer,
             absl::UnavailableError(absl::StrCat("rank ", peer, " was lost: ", status.ToString())),
             /*died=*/true);
    return;
  }
  if (goodbye.dtype() != DType::kInt64 || goodbye.num_elements() != 1 ||
      !goodbye.location().is_host()) {
    StopPair(peer, absl::DataLossError(absl::StrCat("rank ", peer, " said goodbye with ",
                                                    Describe(goodbye), ", not one int64")),
             /*died=*/true);
    return;
  }
  StopPair(peer,
           absl::FailedPreconditionError(
               absl::StrCat("rank ", peer, " destroyed its process group")),
           /*died=*/false);
  pairs_->Goodbye(peer, *static_cast<const int64_t*>(goodbye.data()));
}

// What this rank sent the peer will never be taken: drop it (its sends
// fail). What the peer sent is dropped only when it died: after a goodbye,
// values it reported sent may still be landing here, and Recvs still
// waiting at its worker fail when that worker stops.
void ProcessGroupRdv::StopPair(int peer, const absl::Status& why, bool died) {
  if (!pairs_->Stop(peer, why)) return;
  RDV_LOG(Info) << "torch rank " << rank_ << ": stopping the work with rank " << peer << ": "
                << why;
  PairStates::Dropping dropping(*pairs_, peer);
  Direction(rank_, peer)->StartAbort(why);
  if (died) Direction(peer, rank_)->StartAbort(why);
}

// Tells every peer still there how many values this rank sent it, then
// waits (at most the peer timeout) for each to answer that it took them,
// or to leave as well.
void ProcessGroupRdv::SayGoodbye() {
  // The farewell Recvs still waiting once this rank is done waiting (their
  // peer left first) are withdrawn before the worker stops, not left to
  // find the peer gone.
  struct Farewells {
    CancellationManager cancellation;
    std::mutex mu;
    int pending = 0;
    Notification ended;
  };
  auto farewells = std::make_shared<Farewells>();
  std::vector<int> awaited;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || !pairs_->Of(peer).ok()) continue;
    {
      std::lock_guard lock(farewells->mu);
      ++farewells->pending;
    }
    Closing()->RecvAsync(KeyFrom(peer, rank_, kFarewell, 0), HostArgs(&farewells->cancellation),
                         [pairs = pairs_, peer, farewells](const absl::Status&,
                                                           const RendezvousArgs&,
                                                           const RendezvousArgs&, const Tensor&,
                                                           bool) {
                           pairs->Farewelled(peer);
                           std::lock_guard lock(farewells->mu);
                           if (--farewells->pending == 0) farewells->ended.Notify();
                         });
    Tensor count = ValueOrThrow(Tensor::Allocate(HostAllocator(), DType::kInt64,
                                                 ValueOrThrow(TensorShape::Create({1}))));
    *static_cast<int64_t*>(count.data()) = pairs_->SentTo(peer);
    const absl::Status said = Closing()->Send(KeyFrom(rank_, peer, kGoodbye, 0), {}, count, false);
    if (said.ok()) awaited.push_back(peer);
  }
  const absl::Time deadline = absl::Now() + peer_timeout_;
  for (const int peer : awaited) {
    if (!pairs_->AwaitFarewell(peer, deadline)) {
      RDV_LOG(Warning) << "torch rank " << rank_ << ": rank " << peer
                       << " did not confirm it took the " << pairs_->SentTo(peer)
                       << " values this rank sent it within RDV_PEER_TIMEOUT_MS; its Recvs of "
                          "those not taken fail";
    }
  }
  {
    std::lock_guard lock(farewells->mu);
    if (awaited.empty() && farewells->pending == 0) return;
  }
  farewells->cancellation.StartCancel();
  farewells->ended.WaitForNotificationWithTimeout(peer_timeout_);
}

namespace {
std::atomic<ProcessGroupRdv::BlockingSection> blocking_section{nullptr};
}  // namespace

void ProcessGroupRdv::SetBlockingSection(BlockingSection section) { blocking_section = section; }

ProcessGroupRdv::~ProcessGroupRdv() {
  const BlockingSection section = blocking_section.load();
  if (section == nullptr) {
    Close();
  } else {
    section([this] { Close(); });
  }
}

void ProcessGroupRdv::Close() {
  channels_->Close(absl::CancelledError("this rank destroyed its process group"));
  SayGoodbye();
  for (auto& watch : watches_) {
    if (watch == nullptr) continue;
    watch->cancellation.StartCancel();
    watch->done.WaitForNotification();
  }
  pairs_->StopAll(absl::CancelledError("this rank destroyed its process group"));
  PairStates::Dropping dropping(*pairs_, PairStates::kEveryPeer);
  server_.reset();
}

}  // namespace rdv::pytorch
