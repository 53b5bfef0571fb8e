// The producer's table of tensors lent to consumers (a transport buffer a
// consumer reads, a GPU allocation mapped by CUDA IPC), each under a
// transfer id until the consumer releases it or its step is cleaned up.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "control/worker.pb.h"
#include "core/tensor.h"

namespace rdv::control {

class HeldTransfers {
 public:
  // Keeps `tensor` and `keepalive` (a registration, say) until released;
  // returns the new transfer id.
  uint64_t Hold(int64_t step_id, Tensor tensor, std::shared_ptr<const void> keepalive);
  // INVALID_ARGUMENT for a transfer this worker does not hold (unknown id,
  // another step, or a length that differs from the tensor's); OK for one
  // of a step cleaned up lately (its ack crossed the cleanup).
  absl::Status Release(const ReleasedTransfer& transfer);
  void DropStep(int64_t step_id);
  void Clear();

 private:
  struct Held {
    int64_t step_id;
    Tensor tensor;
    std::shared_ptr<const void> keepalive;
  };
  // Steps cleaned up lately, whose late acks are not errors; bounded.
  static constexpr size_t kCleanedStepsKept = 4096;

  std::mutex mu_;
  uint64_t next_transfer_id_ = 1;                 // mu_
  absl::flat_hash_map<uint64_t, Held> held_;      // mu_
  absl::flat_hash_set<int64_t> cleaned_steps_;    // mu_
};

}  // namespace rdv::control
