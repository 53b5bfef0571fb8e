// Read-ahead: a key received several times in one step (a FIFO: the next
// microbatch, the next message of a torch tag) has its next values asked
// for before their Recvs, through the fast path (control/fast_path.h). The
// producer sends each as soon as it is Sent, into memory the consumer
// holds, and a later Recv finds it there with no trip to the producer
// (docs/fast_path.md, "Read-ahead").
//
// One per step's rendezvous (control/rpc_remote_rendezvous.h): what it
// holds goes with the step. A key's first fast Recv in a step reads nothing
// ahead, so a key that recurs once per step (the same edge in the next
// step) costs nothing. From its second on, each Recv takes the oldest
// slot and tops the key up so that `depth` more are asked for: at once for
// a shallow key, once half are taken for a deep one (kBatchFromDepth). Slots hand
// their values out in the order they were asked for, which is the order
// the producer took them.
//
// Nothing is lost: a Recv cancelled before its slot's value came gives the
// slot back, first in line for the next Recv. Values read ahead that no
// Recv takes are freed with the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace rdv::control {

// The status a read-ahead call ends with when the producer did not serve
// it (too many requests waited there): the Recv that takes its slot asks
// for itself instead. A read-ahead call never falls back to RecvTensor on
// its own, which could take a value out of the order the slots keep.
absl::Status NotServedAhead();
bool IsNotServedAhead(const absl::Status& status);

class ReadAhead {
 public:
  using Finish = absl::AnyInvocable<void(absl::Status, Tensor, bool) &&>;

  // One value asked for ahead. Thread-safe.
  class Slot {
   public:
    // The fast call's end (any thread). Runs the claiming Recv's finish,
    // or keeps the result for the Recv that claims it.
    void Deliver(absl::Status status, Tensor value, bool is_dead);
    // The Recv that takes this slot: `finish` runs now (on this thread)
    // when the result came, else on the thread that delivers it.
    void Claim(Finish finish);

   private:
    friend class ReadAhead;
    // Takes the claim back when the result has not come; false when it
    // came (the claim's finish has run or runs now).
    bool Unclaim(Finish* finish);

    std::mutex mu_;
    bool delivered_ = false;      // mu_
    absl::Status status_;         // mu_: until claimed
    Tensor value_;                // mu_: until claimed
    bool is_dead_ = false;        // mu_
    Finish finish_;               // mu_: the claim, until delivered
  };

  // Values of a key asked for ahead of its Recvs: at most `max_values`,
  // and no more than `bytes` bytes together (at least one, when `bytes`
  // is at least the value's size).
  static constexpr size_t kMaxValues = 16;
  // From this depth up a key is topped up by half its depth at a time, so
  // that one message asks for several values.
  static constexpr size_t kBatchFromDepth = 8;
  static size_t DepthFor(size_t budget_bytes, size_t value_bytes);
  // The largest value read ahead for a Recv that brings a destination of
  // its own (RendezvousArgs::landing, as torch's recv does): a value read
  // ahead lands in the transport's memory and is copied there, which from
  // this size up costs more than the trip it spares (docs/fast_path.md).
  static constexpr size_t kMaxLandedValueBytes = size_t{256} << 10;

  // A Recv of `key`. Null when it does not read ahead (the key's first
  // Recv in this step, or `depth` 0): the Recv asks for itself. Else the
  // slot it takes; `started` gets the slots asked for now, whose calls the
  // caller starts, oldest first, without holding locks a call's end takes.
  std::shared_ptr<Slot> Take(absl::string_view key, size_t depth,
                             std::vector<std::shared_ptr<Slot>>* started);
  // A Recv of `key` once the fast path forgot it (a value that cannot come
  // fast, as a string, came): the oldest slot still asked for, which must go
  // to it before the producer's later values do, or null. Asks for nothing.
  std::shared_ptr<Slot> TakeLeft(absl::string_view key);
  // Whether TakeLeft would find a slot now.
  bool HasLeft(absl::string_view key);
  // The Recv that claimed `slot` is cancelled. True when it is withdrawn
  // from the slot before the value came (its finish, the claim's, is in
  // `finish` for the caller to end), and the slot goes first in line
  // again; false when the value came first and the Recv ends with it.
  bool Withdraw(absl::string_view key, const std::shared_ptr<Slot>& slot, Finish* finish);
  // The step was aborted: no Recv will take what was read ahead, which goes
  // now (calls still out drop their values when they end).
  void Clear();

 private:
  struct KeyState {
    int64_t recvs = 0;
    std::deque<std::shared_ptr<Slot>> slots;  // oldest first, none claimed
  };
  static std::shared_ptr<Slot> PopOldest(KeyState& state);
  std::mutex mu_;
  absl::flat_hash_map<std::string, KeyState> keys_;  // mu_
};

}  // namespace rdv::control
