#include "control/endpoint_cache.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv::control {

EndpointCache::EndpointCache(std::shared_ptr<const plugin::Transport> transport)
    : transport_(std::move(transport)), connector_([this] { ConnectLoop(); }) {}

EndpointCache::~EndpointCache() { Shutdown(); }

void EndpointCache::Shutdown() {
  PendingMap abandoned;
  std::vector<Endpoint> endpoints;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    abandoned.swap(pending_);
    for (auto& [address, endpoint] : endpoints_) endpoints.push_back(endpoint);
    endpoints_.clear();
  }
  work_.notify_all();
  std::call_once(joined_, [this] { connector_.join(); });
  // Outside the lock: an abort runs the endpoint's callbacks.
  for (const Endpoint& endpoint : endpoints) endpoint->Abort();
  for (auto& [address, pending] : abandoned) {
    for (std::vector<Ready>* callers : {&pending.waiting, &pending.after_forget}) {
      for (Ready& ready : *callers) {
        std::move(ready)(absl::CancelledError("the data plane is shutting down"));
      }
    }
  }
}

void EndpointCache::With(const std::string& address, Ready ready) {
  std::unique_lock lock(mu_);
  if (auto it = endpoints_.find(address); it != endpoints_.end()) {
    Endpoint endpoint = it->second;
    lock.unlock();
    std::move(ready)(std::move(endpoint));
    return;
  }
  if (stopping_) {
    lock.unlock();
    std::move(ready)(absl::CancelledError("the data plane is shutting down"));
    return;
  }
  auto [it, first] = pending_.try_emplace(address);
  Pending& pending = it->second;
  (pending.forgotten ? pending.after_forget : pending.waiting).push_back(std::move(ready));
  if (!first) return;
  queue_.push_back(address);
  lock.unlock();
  work_.notify_one();
}

void EndpointCache::ConnectLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const std::string address = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Connect(address);
    lock.lock();
  }
}

void EndpointCache::Connect(const std::string& address) {
  absl::StatusOr<std::unique_ptr<plugin::TransportEndpoint>> made = transport_->Connect(address);
  std::optional<Endpoint> endpoint;
  if (made.ok()) endpoint = *std::move(made);
  // The callers that waited for the connection run before the endpoint is
  // published, and those that come meanwhile wait behind them: messages to
  // a peer leave in the order they were given (a FIFO key's read-ahead
  // counts on it, control/read_ahead.h).
  while (true) {
    std::vector<Ready> waiting;
    absl::StatusOr<Endpoint> outcome = absl::UnknownError("not connected");
    {
      std::lock_guard lock(mu_);
      auto it = pending_.find(address);
      if (it == pending_.end()) return;  // Shutdown took it
      waiting = std::move(it->second.waiting);
      it->second.waiting.clear();
      if (it->second.peer_lost) {
        outcome = absl::UnavailableError(
            absl::StrCat("the peer was lost while ", transport_->name(), " connected to it"));
      } else if (!endpoint.has_value()) {
        outcome = made.status();
      } else {
        outcome = *endpoint;
      }
      if (waiting.empty()) {
        EndConnect(it, std::move(outcome));
        return;
      }
    }
    for (Ready& ready : waiting) std::move(ready)(outcome);
  }
}

void EndpointCache::EndConnect(PendingMap::iterator it, absl::StatusOr<Endpoint> outcome) {
  const std::string& address = it->first;
  Pending& pending = it->second;
  if (!pending.forgotten) {
    if (outcome.ok()) endpoints_[address] = *std::move(outcome);
    pending_.erase(it);
    return;
  }
  if (pending.after_forget.empty()) {
    pending_.erase(it);
    return;
  }
  pending.waiting = std::move(pending.after_forget);
  pending.after_forget.clear();
  pending.forgotten = false;
  queue_.push_back(address);  // the connector loop takes it next
}

void EndpointCache::Forget(const std::string& address) {
  std::lock_guard lock(mu_);
  endpoints_.erase(address);
  if (auto it = pending_.find(address); it != pending_.end()) it->second.forgotten = true;
}

void EndpointCache::PeerLost(const std::string& address) {
  Endpoint endpoint;
  {
    std::lock_guard lock(mu_);
    if (auto it = pending_.find(address); it != pending_.end()) it->second.peer_lost = true;
    auto it = endpoints_.find(address);
    if (it == endpoints_.end()) return;
    endpoint = std::move(it->second);
    endpoints_.erase(it);
  }
  // Outside the lock: an abort runs the endpoint's callbacks.
  endpoint->Abort();
}

}  // namespace rdv::control
