#include "control/peer_watch.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "control/protocol.h"
#include "rdv/control/worker.grpc.pb.h"
#include "core/logging.h"

namespace rdv::control {
namespace {

// How long the thread waits on a connection before it looks again at what
// is watched (and whether to stop).
constexpr absl::Duration kSlice = absl::Milliseconds(100);
// How long the thread goes on watching after the last watch was added
// before it sleeps until the next: a stream of short transfers (a watch per
// value sent, ended within microseconds) then adds its watches without
// waking it for each.
constexpr absl::Duration kLinger = absl::Seconds(1);

}  // namespace

class PeerWatch::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(std::shared_ptr<grpc::Channel> channel, std::string worker_name, std::string address,
       absl::Duration peer_timeout);
  // Asks the thread to stop; joins it unless called on it.
  void Stop();
  uint64_t Add(Lost lost, bool heard, Stake stake);
  void SetDeadline(uint64_t id, absl::Time deadline);
  void Unwatch(uint64_t id);
  bool WatchingReached() const;

 private:
  struct Watched {
    Lost lost;
    Stake stake = Stake::kAwaited;
    absl::Time deadline = absl::InfiniteFuture();
  };

  void Run();
  // Tells the watches whose deadline passed. Takes and gives back `lock`.
  void TellExpired(std::unique_lock<std::mutex>& lock);
  // Waits a while on the connection; true when the worker is lost, with
  // why in `*why`.
  bool CheckOnce(std::string* why);
  void MarkReached();
  // Whether the worker answers a Handshake within the peer timeout.
  bool Answers(std::string* why);

  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<WorkerService::Stub> stub_;
  const std::string worker_name_;
  const std::string address_;
  const absl::Duration peer_timeout_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  absl::flat_hash_map<uint64_t, Watched> watches_;  // mu_
  uint64_t next_id_ = 1;                         // mu_
  bool running_ = false;                         // mu_: thread_ is in Run
  bool idle_ = false;                            // mu_: Run sleeps until a watch comes
  absl::Time last_added_ = absl::InfinitePast();  // mu_
  bool reached_ = false;                         // mu_: answered since last lost
  bool stop_ = false;                            // mu_
  grpc::ClientContext* probe_ = nullptr;         // mu_: the Handshake in flight
  std::thread thread_;
};

PeerWatch::Impl::Impl(std::shared_ptr<grpc::Channel> channel, std::string worker_name,
                      std::string address, absl::Duration peer_timeout)
    : channel_(std::move(channel)),
      stub_(WorkerService::NewStub(channel_)),
      worker_name_(std::move(worker_name)),
      address_(std::move(address)),
      peer_timeout_(peer_timeout) {}

void PeerWatch::Impl::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (probe_ != nullptr) probe_->TryCancel();
  }
  changed_.notify_all();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

uint64_t PeerWatch::Impl::Add(Lost lost, bool heard, Stake stake) {
  std::unique_lock lock(mu_);
  if (heard) reached_ = true;
  const uint64_t id = next_id_++;
  watches_.emplace(id, Watched{std::move(lost), stake});
  last_added_ = absl::Now();
  if (running_) {
    if (idle_) changed_.notify_all();
    return id;
  }
  // The previous thread has left Run (or never ran).
  if (thread_.joinable()) thread_.join();
  running_ = true;
  thread_ = std::thread([self = shared_from_this()] { self->Run(); });
  return id;
}

void PeerWatch::Impl::SetDeadline(uint64_t id, absl::Time deadline) {
  std::lock_guard lock(mu_);
  if (auto it = watches_.find(id); it != watches_.end()) it->second.deadline = deadline;
}

void PeerWatch::Impl::TellExpired(std::unique_lock<std::mutex>& lock) {
  const absl::Time now = absl::Now();
  std::vector<Lost> expired;
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    expired.push_back(std::move(it->second.lost));
    watches_.erase(it++);
  }
  if (expired.empty()) return;
  lock.unlock();
  const absl::Status passed = absl::DeadlineExceededError("the watch's deadline passed");
  for (Lost& lost : expired) std::move(lost)(passed);
  // A callback may own the last reference to this watch's owner, whose
  // destruction takes mu_.
  expired.clear();
  lock.lock();
}

void PeerWatch::Impl::Unwatch(uint64_t id) {
  std::lock_guard lock(mu_);
  watches_.erase(id);
}

bool PeerWatch::Impl::WatchingReached() const {
  std::lock_guard lock(mu_);
  return reached_ && !watches_.empty();
}

void PeerWatch::Impl::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (watches_.empty() && absl::Now() - last_added_ >= kLinger) {
      idle_ = true;
      const bool more = changed_.wait_for(lock, absl::ToChronoNanoseconds(peer_timeout_),
                                          [this] { return stop_ || !watches_.empty(); });
      idle_ = false;
      if (!more) break;
      continue;
    }
    lock.unlock();
    std::string why;
    const bool lost = CheckOnce(&why);
    lock.lock();
    TellExpired(lock);
    if (stop_) continue;
    if (lost && !reached_) {
      // Unreachable, not lost: look again a slice later, not in a loop.
      changed_.wait_for(lock, absl::ToChronoNanoseconds(kSlice), [this] { return stop_; });
      continue;
    }
    if (!lost) continue;
    reached_ = false;
    // Every transfer ended while the check ran (a peer that left cleanly
    // after the last one): nobody to tell, nothing was lost.
    if (watches_.empty()) continue;
    const absl::Status status = absl::UnavailableError(
        absl::StrCat("worker ", worker_name_, " at ", address_,
                     " was lost while a transfer with it was in flight: ", why));
    const bool awaited = std::any_of(watches_.begin(), watches_.end(), [](const auto& watch) {
      return watch.second.stake == Stake::kAwaited;
    });
    if (awaited) {
      RDV_LOG(Warning) << status.message();
    } else {
      RDV_LOG(Info) << status.message() << " (no Recv here waited for what it ended)";
    }
    absl::flat_hash_map<uint64_t, Watched> told = std::move(watches_);
    watches_.clear();
    lock.unlock();
    for (auto& [id, watched] : told) std::move(watched.lost)(status);
    told.clear();
    lock.lock();
  }
  running_ = false;
}

bool PeerWatch::Impl::CheckOnce(std::string* why) {
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/false);
  if (state == GRPC_CHANNEL_READY) {
    channel_->WaitForStateChange(state, absl::ToChronoTime(absl::Now() + kSlice));
    state = channel_->GetState(false);
    if (state == GRPC_CHANNEL_READY) {
      MarkReached();
      return false;
    }
  }
  if (!Answers(why)) return true;
  MarkReached();
  return false;
}

void PeerWatch::Impl::MarkReached() {
  std::lock_guard lock(mu_);
  reached_ = true;
}

bool PeerWatch::Impl::Answers(std::string* why) {
  // Half the peer timeout: keepalive took up to one already to notice a
  // silent peer.
  const absl::Duration limit = peer_timeout_ / 2;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + limit));
  {
    std::lock_guard lock(mu_);
    if (stop_) return true;
    probe_ = &context;
  }
  HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  HandshakeResponse response;
  const grpc::Status status = stub_->Handshake(&context, request, &response);
  {
    std::lock_guard lock(mu_);
    probe_ = nullptr;
  }
  const grpc::StatusCode code = status.error_code();
  if (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return true;
  }
  *why = absl::StrCat("its connection dropped and it did not answer within ",
                      absl::FormatDuration(limit), " (", status.error_message(), ")");
  return false;
}

PeerWatch::PeerWatch(std::shared_ptr<grpc::Channel> channel, std::string worker_name,
                     std::string address, absl::Duration peer_timeout)
    : impl_(std::make_shared<Impl>(std::move(channel), std::move(worker_name), std::move(address),
                                   peer_timeout)) {}

PeerWatch::~PeerWatch() { impl_->Stop(); }

uint64_t PeerWatch::Watch(Lost lost, Stake stake) {
  return impl_->Add(std::move(lost), /*heard=*/true, stake);
}

uint64_t PeerWatch::WatchOnceAnswered(Lost lost) {
  return impl_->Add(std::move(lost), /*heard=*/false, Stake::kUnawaited);
}

void PeerWatch::SetDeadline(uint64_t id, absl::Time deadline) { impl_->SetDeadline(id, deadline); }

void PeerWatch::Unwatch(uint64_t id) { impl_->Unwatch(id); }

bool PeerWatch::WatchingReached() const { return impl_->WatchingReached(); }

}  // namespace rdv::control
