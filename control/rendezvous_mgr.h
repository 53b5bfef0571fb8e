// One rendezvous per step: created on first use, by a Send, a local Recv or
// a RecvTensor that reached this worker before the step's own work did.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "core/rendezvous.h"

namespace rdv::control {

class RendezvousMgr {
 public:
  using Factory = std::function<std::shared_ptr<Rendezvous>(int64_t step_id)>;

  explicit RendezvousMgr(Factory factory) : factory_(std::move(factory)) {}
  // CleanupAll().
  ~RendezvousMgr();
  RendezvousMgr(const RendezvousMgr&) = delete;
  RendezvousMgr& operator=(const RendezvousMgr&) = delete;

  std::shared_ptr<Rendezvous> Find(int64_t step_id);
  // The step's rendezvous if it exists (not cleaned up), else null.
  std::shared_ptr<Rendezvous> FindExisting(int64_t step_id) const;

  // Aborts the step's rendezvous with ABORTED "Cleanup <step_id>" (its
  // waiting Recvs fail, its buffered tensors are dropped) and forgets it.
  void Cleanup(int64_t step_id);
  void CleanupAll();

  size_t NumSteps() const;

 private:
  const Factory factory_;
  mutable std::mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<Rendezvous>> steps_;  // guarded by mu_
};

}  // namespace rdv::control
