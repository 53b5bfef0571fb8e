#include "control/peer_watch.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/protocol.h"
#include "core/logging.h"

namespace rdv::control {
namespace {

// How long the thread waits on a connection before it looks again at what
// is watched (and whether to stop).
constexpr absl::Duration kSlice = absl::Milliseconds(100);

}  // namespace

PeerWatch::PeerWatch(std::shared_ptr<grpc::Channel> channel, std::string worker_name,
                     std::string address, absl::Duration peer_timeout)
    : channel_(std::move(channel)),
      stub_(WorkerService::NewStub(channel_)),
      worker_name_(std::move(worker_name)),
      address_(std::move(address)),
      peer_timeout_(peer_timeout) {}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (probe_ != nullptr) probe_->TryCancel();
  }
  changed_.notify_all();
  if (!thread_.joinable()) return;
  // A lost callback may drop the last reference to this watch's owner.
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

uint64_t PeerWatch::Watch(Lost lost) { return Add(std::move(lost), /*heard=*/true); }

uint64_t PeerWatch::WatchOnceAnswered(Lost lost) { return Add(std::move(lost), /*heard=*/false); }

uint64_t PeerWatch::Add(Lost lost, bool heard) {
  std::unique_lock lock(mu_);
  if (heard) reached_ = true;
  const uint64_t id = next_id_++;
  watches_.emplace(id, Watched{std::move(lost)});
  if (running_) {
    changed_.notify_all();
    return id;
  }
  // The previous thread has left Run (or never ran).
  if (thread_.joinable()) thread_.join();
  running_ = true;
  thread_ = std::thread([this] { Run(); });
  return id;
}

void PeerWatch::SetDeadline(uint64_t id, absl::Time deadline) {
  std::lock_guard lock(mu_);
  if (auto it = watches_.find(id); it != watches_.end()) it->second.deadline = deadline;
}

void PeerWatch::TellExpired(std::unique_lock<std::mutex>& lock) {
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
  lock.lock();
}

void PeerWatch::Unwatch(uint64_t id) {
  std::lock_guard lock(mu_);
  watches_.erase(id);
}

bool PeerWatch::WatchingReached() const {
  std::lock_guard lock(mu_);
  return reached_ && !watches_.empty();
}

void PeerWatch::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (watches_.empty()) {
      const bool more = changed_.wait_for(lock, absl::ToChronoNanoseconds(peer_timeout_),
                                          [this] { return stop_ || !watches_.empty(); });
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
    const absl::Status status = absl::UnavailableError(
        absl::StrCat("worker ", worker_name_, " at ", address_,
                     " was lost while a transfer with it was in flight: ", why));
    RDV_LOG(Warning) << status.message();
    absl::flat_hash_map<uint64_t, Watched> told = std::move(watches_);
    watches_.clear();
    lock.unlock();
    for (auto& [id, watched] : told) std::move(watched.lost)(status);
    lock.lock();
  }
  running_ = false;
}

bool PeerWatch::CheckOnce(std::string* why) {
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

void PeerWatch::MarkReached() {
  std::lock_guard lock(mu_);
  reached_ = true;
}

bool PeerWatch::Answers(std::string* why) {
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

}  // namespace rdv::control
