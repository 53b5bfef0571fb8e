#include "pytorch/pair_states.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv::pytorch {
namespace {

// What this thread is dropping (PairStates::Dropping): rdv drops a
// stopped pair's buffered values inside StartAbort, on the caller's thread,
// while values already taken are let go of on rdv's threads.
thread_local const PairStates* dropping_states = nullptr;
thread_local int dropping_peer = 0;

}  // namespace

PairStates::Dropping::Dropping(const PairStates& states, int peer) {
  dropping_states = &states;
  dropping_peer = peer;
}

PairStates::Dropping::~Dropping() { dropping_states = nullptr; }

absl::Status PairStates::OfRelease(int peer) const {
  if (dropping_states != this || (dropping_peer != kEveryPeer && dropping_peer != peer)) {
    return absl::OkStatus();
  }
  absl::Status why = Of(peer);
  if (why.ok()) why = absl::CancelledError("the values were dropped");
  return absl::Status(why.code(), absl::StrCat(why.message(), " before taking this"));
}

PairStates::PairStates(int size, absl::AnyInvocable<void(int) const> farewell)
    : farewell_(std::move(farewell)), pairs_(static_cast<size_t>(size)) {}

absl::Status PairStates::Of(int peer) const {
  std::lock_guard lock(mu_);
  return pairs_[static_cast<size_t>(peer)].why;
}

bool PairStates::Stop(int peer, const absl::Status& why) {
  std::lock_guard lock(mu_);
  Pair& pair = pairs_[static_cast<size_t>(peer)];
  if (!pair.why.ok()) return false;
  pair.why = why;
  changed_.notify_all();
  return true;
}

void PairStates::Farewelled(int peer) {
  std::lock_guard lock(mu_);
  pairs_[static_cast<size_t>(peer)].farewelled = true;
  changed_.notify_all();
}

bool PairStates::AwaitFarewell(int peer, absl::Time deadline) {
  std::unique_lock lock(mu_);
  const Pair& pair = pairs_[static_cast<size_t>(peer)];
  return changed_.wait_until(lock, absl::ToChronoTime(deadline),
                             [&pair] { return pair.farewelled || !pair.why.ok(); });
}

void PairStates::StopAll(const absl::Status& why) {
  std::lock_guard lock(mu_);
  for (Pair& pair : pairs_) {
    if (pair.why.ok()) pair.why = why;
  }
}

bool PairStates::StageAhead(int peer, size_t bytes) {
  std::lock_guard lock(mu_);
  size_t& staged = pairs_[static_cast<size_t>(peer)].staged_ahead;
  if (bytes > kStagedAheadBytes - staged) return false;
  staged += bytes;
  return true;
}

void PairStates::StagedReleased(int peer, size_t bytes) {
  std::lock_guard lock(mu_);
  pairs_[static_cast<size_t>(peer)].staged_ahead -= bytes;
}

void PairStates::Sent(int peer) {
  std::lock_guard lock(mu_);
  ++pairs_[static_cast<size_t>(peer)].sent;
}

int64_t PairStates::SentTo(int peer) const {
  std::lock_guard lock(mu_);
  return pairs_[static_cast<size_t>(peer)].sent;
}

bool PairStates::FarewellDue(Pair& pair) {
  if (pair.answered || pair.goodbye_after < 0 || pair.taken < pair.goodbye_after) return false;
  pair.answered = true;
  return true;
}

void PairStates::Taken(int peer) {
  bool due;
  {
    std::lock_guard lock(mu_);
    Pair& pair = pairs_[static_cast<size_t>(peer)];
    ++pair.taken;
    due = FarewellDue(pair);
  }
  if (due) farewell_(peer);
}

void PairStates::Goodbye(int peer, int64_t sent) {
  bool due;
  {
    std::lock_guard lock(mu_);
    Pair& pair = pairs_[static_cast<size_t>(peer)];
    pair.goodbye_after = sent;
    due = FarewellDue(pair);
  }
  if (due) farewell_(peer);
}

}  // namespace rdv::pytorch
