// Per peer of a torch rank: whether it may still work with the peer, and
// the closing handshake. A departing rank's goodbye says how many values it
// sent this rank; this rank answers with a farewell once it has taken them
// all, so that the departing rank's worker stays up until its last bytes
// landed here (a transport may report a send done before then). Shared
// with rdv's callbacks, which may outlive the process group. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "core/status.h"

namespace rdv::pytorch {

class PairStates {
 public:
  // `farewell(peer)` answers a peer's goodbye; it runs without the lock,
  // once per peer at most, on the thread that completed the handshake.
  PairStates(int size, absl::AnyInvocable<void(int) const> farewell);

  // OK while this rank works with `peer`; else why it stopped.
  absl::Status Of(int peer) const;
  // True when this call stopped the pair (the first reason wins).
  bool Stop(int peer, const absl::Status& why);
  void StopAll(const absl::Status& why);

  // How a send to `peer` ends when rdv lets go of its bytes: OK when they
  // were taken, the pair's reason when they are being dropped untaken
  // (inside a Dropping on this thread).
  absl::Status OfRelease(int peer) const;

  // While it lives, values to `peer` (kEveryPeer: to all) that rdv lets go
  // of on this thread are being dropped: wrap aborts and shutdowns in it.
  static constexpr int kEveryPeer = -1;
  class Dropping {
   public:
    Dropping(const PairStates& states, int peer);
    ~Dropping();
    Dropping(const Dropping&) = delete;
    Dropping& operator=(const Dropping&) = delete;
  };

  // Staged sends to a peer complete before the peer takes their bytes
  // (ProcessGroupRdv::Send) while their copies not yet taken hold at most
  // this much of this rank's memory per peer; past it, a send completes
  // once taken, as an unstaged one does.
  static constexpr size_t kStagedAheadBytes = size_t{64} << 20;
  // True when `bytes` more fit `peer`'s bound; they count until
  // StagedReleased.
  bool StageAhead(int peer, size_t bytes);
  void StagedReleased(int peer, size_t bytes);

  void Sent(int peer);
  int64_t SentTo(int peer) const;
  // A value from `peer` was taken here (whatever became of it after).
  void Taken(int peer);
  // `peer` said goodbye after sending `sent` values.
  void Goodbye(int peer, int64_t sent);
  // This rank said goodbye: `peer`'s farewell (or the end of its Recv)
  // arrived.
  void Farewelled(int peer);
  // Waits until `peer` answered this rank's goodbye or stopped (it left
  // too, or died: it takes nothing more either way); false at `deadline`.
  bool AwaitFarewell(int peer, absl::Time deadline);

 private:
  struct Pair {
    absl::Status why;
    int64_t sent = 0;
    int64_t taken = 0;
    size_t staged_ahead = 0;  // bytes
    int64_t goodbye_after = -1;  // the peer's count; -1 until its goodbye
    bool answered = false;
    bool farewelled = false;
  };
  // True when the farewell to `pair` is due now (and marks it answered).
  static bool FarewellDue(Pair& pair);

  absl::AnyInvocable<void(int) const> farewell_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Pair> pairs_;  // guarded by mu_
};

}  // namespace rdv::pytorch
