// The producer's table of tensors lent to consumers (a transport buffer a
// consumer reads, a GPU allocation mapped by CUDA IPC), each under a
// transfer id until the consumer releases it, its step is cleaned up, or
// the consumer is lost (control/consumer_lease.h). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "control/consumer_lease.h"
#include "control/leased_table.h"
#include "rdv/control/worker.pb.h"
#include "core/tensor.h"

namespace rdv::control {

class HeldTransfers {
 public:
  // Keeps `tensor` and `keepalive` (a registration, say) until released,
  // or until `consumer` says its consumer is lost; returns the transfer id:
  // 64 random bits, so that only the consumer it was given to can release
  // it (a member guessing another's id would free a buffer that consumer
  // may still be reading).
  uint64_t Hold(int64_t step_id, Tensor tensor, std::shared_ptr<const void> keepalive,
                const ConsumerWatcher& consumer);
  // INVALID_ARGUMENT for a transfer this worker does not hold (unknown id,
  // another step, or a length that differs from the tensor's); OK for one
  // of a step cleaned up lately (its ack crossed the cleanup).
  absl::Status Release(const ReleasedTransfer& transfer);
  void DropStep(int64_t step_id);
  void Clear() { held_.Clear(); }
  size_t size() const { return held_.size(); }

 private:
  struct Held {
    int64_t step_id;
    Tensor tensor;
    std::shared_ptr<const void> keepalive;
  };
  // Steps cleaned up lately, whose late acks are not errors; bounded.
  static constexpr size_t kCleanedStepsKept = 4096;

  std::mutex random_mu_;
  absl::BitGen random_;  // random_mu_
  LeasedTable<uint64_t, Held> held_;
  std::mutex cleaned_mu_;
  absl::flat_hash_set<int64_t> cleaned_steps_;  // cleaned_mu_
};

}  // namespace rdv::control
