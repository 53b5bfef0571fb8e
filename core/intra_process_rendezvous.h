// The rendezvous between devices of one process. Host to host (pageable or
// pinned) the Recv gets the sent tensor itself: same buffer, no copy, any
// size. When either side is a GPU the Recv gets a new tensor in the
// destination's memory, filled by DMA; its callback runs on a CUDA
// completion thread once the copy is done.
//
// The destination is the key's dst device: a GPU device means that GPU's
// memory, unless RendezvousArgs::alloc_attrs.on_host asks for host memory;
// every other device type means host memory.
#pragma once

#include "core/local_rendezvous.h"

namespace rdv {

class IntraProcessRendezvous final : public Rendezvous {
 public:
  IntraProcessRendezvous() = default;

  absl::Status Send(const ParsedKey& key, const RendezvousArgs& args, const Tensor& value,
                    bool is_dead) override;
  // Errors of the copy (no CUDA, a string tensor to or from a GPU, a CUDA
  // failure) complete the Recv; the value is consumed either way.
  void RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                 RecvDoneCallback done) override;
  void StartAbort(const absl::Status& status) override;

  LocalRendezvous::Pending CountPending() const { return local_.CountPending(); }

 private:
  LocalRendezvous local_;
};

// Where a Recv of `key` with `args` wants its tensor.
MemoryLocation RecvDestination(const ParsedKey& key, const RendezvousArgs& args);

}  // namespace rdv
