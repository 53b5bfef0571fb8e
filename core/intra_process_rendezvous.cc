#include "core/intra_process_rendezvous.h"

#include <utility>

#include "core/device_copy.h"

namespace rdv {

MemoryLocation RecvDestination(const ParsedKey& key, const RendezvousArgs& args) {
  if (key.dst().IsGpu() && !args.alloc_attrs.on_host) return MemoryLocation::Cuda(key.dst().id);
  return MemoryLocation::Host();
}

absl::Status IntraProcessRendezvous::Send(const ParsedKey& key, const RendezvousArgs& args,
                                          const Tensor& value, bool is_dead) {
  return local_.Send(key, args, value, is_dead);
}

void IntraProcessRendezvous::RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                                       RecvDoneCallback done) {
  const MemoryLocation destination = RecvDestination(key, args);
  const bool as_sent = args.as_sent;
  local_.RecvAsync(
      key, args,
      [destination, as_sent, done = std::move(done)](const absl::Status& status,
                                            const RendezvousArgs& send_args,
                                            const RendezvousArgs& recv_args, const Tensor& value,
                                            bool is_dead) mutable {
        const MemoryLocation source = value.location();
        const bool shareable =
            as_sent || (source.is_host() && destination.is_host()) || source == destination;
        if (!status.ok() || is_dead || !value.IsInitialized() || shareable) {
          std::move(done)(status, send_args, recv_args, value, is_dead);
          return;
        }
        CopyTensorAsync(value, destination,
                        [send_args, recv_args, done = std::move(done)](
                            absl::StatusOr<Tensor> copied) mutable {
                          if (copied.ok()) {
                            std::move(done)(absl::OkStatus(), send_args, recv_args, *copied,
                                            false);
                          } else {
                            std::move(done)(copied.status(), send_args, recv_args, Tensor(),
                                            false);
                          }
                        });
      });
}

void IntraProcessRendezvous::StartAbort(const absl::Status& status) { local_.StartAbort(status); }

}  // namespace rdv
