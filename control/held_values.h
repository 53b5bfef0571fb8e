// The producer's values taken for single_message RecvTensors whose answer
// needs a stream (control/worker.proto, fetch_held), each kept under the
// consumer's step and request id until its fetch_held call, its step's
// cleanup, or the consumer's loss (control/consumer_lease.h). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "control/consumer_lease.h"
#include "core/tensor.h"

namespace rdv::control {

class HeldValues {
 public:
  struct Value {
    Tensor tensor;
    bool is_dead = false;
  };

  HeldValues();

  void Hold(int64_t step_id, int64_t request_id, Value value, const ConsumerWatcher& consumer);
  // The value, once; nullopt when there is none (already fetched, its step
  // cleaned up, or its consumer lost).
  std::optional<Value> Take(int64_t step_id, int64_t request_id);
  void DropStep(int64_t step_id);
  void Clear();
  size_t size() const;

 private:
  using Id = std::pair<int64_t, int64_t>;  // step, request id
  struct Held {
    Value value;
    ConsumerLease lease;
  };
  // Shared with the leases' callbacks, which may outlive this object.
  struct Table {
    std::optional<Held> Remove(Id id);

    mutable std::mutex mu;
    absl::flat_hash_map<Id, Held> held;  // mu
  };

  const std::shared_ptr<Table> table_;
};

}  // namespace rdv::control
