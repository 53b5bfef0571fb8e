// The Rendezvous contract, as in TensorFlow. A producer Sends a tensor
// under a key; a consumer Recvs it, before or after the Send. Each key is a
// FIFO channel: the n-th Recv gets the n-th Send.
//
// Threads: every method is thread-safe. Send never blocks. A RecvAsync
// callback runs exactly once, outside every rendezvous lock, on one of: the
// thread that calls RecvAsync (value already there, or rendezvous aborted),
// the thread whose Send matches it, the thread that calls StartAbort or
// CancellationManager::StartCancel, or a copy-completion thread of the
// implementation (IntraProcessRendezvous with a GPU copy).
#pragma once

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "core/cancellation.h"
#include "core/rendezvous_key.h"
#include "core/status.h"
#include "core/tensor.h"

namespace rdv {

struct AllocatorAttributes {
  // The consumer wants the tensor in host memory even though the key's
  // destination is a GPU (TensorFlow's _HostRecv).
  bool on_host = false;
};

struct RendezvousArgs {
  AllocatorAttributes alloc_attrs;
  // The Recv gets the sent tensor itself, wherever it lives, never a copy:
  // a worker answering RecvTensor decides itself how a GPU tensor leaves
  // (CUDA IPC, GPUDirect or staging). Overrides alloc_attrs.
  bool as_sent = false;
  // Not owned; must outlive the Recv. When it is cancelled, a waiting Recv
  // completes with CANCELLED and leaves its channel.
  CancellationManager* cancellation_manager = nullptr;
  // Host memory (aligned to Allocator::kAlignment) a remote RecvAsync may
  // land the bytes in, so that nothing copies them after the transfer: used
  // when the value is a host tensor of exactly this many bytes that comes
  // by a tagged send (a get reads into registered memory only, the
  // RecvTensor stream into rdv's own); the Recv's tensor then shares this
  // buffer, which rdv writes until the Recv completes. Ignored otherwise,
  // and by local Recvs: check the tensor's data() to know.
  std::shared_ptr<Buffer> landing;
};

// status, the producer's args, the consumer's args, the value, is_dead.
// The tensor reference is valid only during the call; copy the Tensor to
// keep it (a copy shares the buffer).
using RecvDoneCallback =
    absl::AnyInvocable<void(const absl::Status&, const RendezvousArgs&, const RendezvousArgs&,
                            const Tensor&, bool) &&>;

// CANCELLED, naming the key: how every rendezvous fails a cancelled Recv.
// (TensorFlow says CANCELLED "RecvAsync is cancelled." without the key; the
// code is the same, so code that tests the code behaves alike.)
absl::Status RecvCancelledError(absl::string_view key);

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  // Buffers `value` (or hands it to a waiting Recv) and returns at once.
  // A GPU tensor's bytes must be ready when Send is called. Fails with the
  // abort status after StartAbort.
  virtual absl::Status Send(const ParsedKey& key, const RendezvousArgs& args, const Tensor& value,
                            bool is_dead) = 0;

  // Calls `done` exactly once when the value exists, or with an error.
  // Implementations must complete a cancelled Recv promptly: the blocking
  // Recv below relies on it.
  virtual void RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                         RecvDoneCallback done) = 0;

  // Blocks until the value exists, `timeout` passes (DEADLINE_EXCEEDED) or
  // the Recv fails. On timeout the Recv is withdrawn from its channel before
  // this returns, so nothing refers to the caller afterwards and a later
  // Send stays buffered for the next Recv. Built on RecvAsync; a
  // rendezvous may override it to do the work on the calling thread.
  virtual absl::Status Recv(const ParsedKey& key, const RendezvousArgs& args, Tensor* value,
                    bool* is_dead, absl::Duration timeout = absl::InfiniteDuration());

  // Fails every waiting Recv with `status`, drops every buffered value, and
  // makes every later Send and Recv fail with `status`. The first abort's
  // status wins. An OK status is turned into ABORTED.
  virtual void StartAbort(const absl::Status& status) = 0;
};

}  // namespace rdv
