// The UCX plugin's mapped memory (setting `memory` `mapped`): System V
// shared-memory segments it allocates itself, and registers with UCX like
// any other buffer. A peer on the same host copies a get from such a
// segment (or a put into it) through its own attachment, without UCX: UCX
// 1.13 crashes a process whose attach of a peer's allocation fails (the
// owner freed it or exited: its key unpack releases a half-made key),
// whereas a failed shmat is an error. A get attaches read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <utility>

#include "plugin/rdv_transport.h"

namespace rdv::ucx_plugin {

// A segment allocated here: removed (IPC_RMID) at once, so that it goes
// with the last process that has it attached, even one that crashed.
struct SharedSegment {
  void* address = nullptr;
  size_t length = 0;
  int id = -1;
};
// Its pages are allocated and mapped before it is returned.
// RESOURCE_EXHAUSTED (with the limit to raise) when the kernel refuses.
int AllocateSegment(size_t length, SharedSegment* out, rdv_transport_error_t* error);
void FreeSegment(const SharedSegment& segment);

// Identifies this host and IPC namespace, where a segment id means the
// same segment: the boot id and the namespace's inode.
struct IpcScope {
  char boot_id[40];
  uint64_t ipc_namespace;
};
const IpcScope& ThisIpcScope();
bool SameIpcScope(const IpcScope& other);

// A peer's segment attached here; detached when the last holder lets go.
struct Attachment {
  const char* base = nullptr;
  size_t length = 0;
  ~Attachment();
};

// The peers' segments attached by this context, kept: attaching anew for
// every transfer would map every page of the segment again. Bounded; the oldest goes
// first, and stays attached while a copy still holds it. A segment only
// this context still has attached is dropped at the next new attachment,
// so a producer's freed memory does not outlive it for long. Thread-safe.
class Attachments {
 public:
  static constexpr size_t kCapacity = 256;

  // Segment `id` of at least `length` bytes, read-only unless `writable`;
  // UNAVAILABLE naming the errno when it is gone or too small. A new
  // attachment maps the segment's pages before it returns (outside the
  // lock), so it blocks for about 0.5 s per GiB here.
  int Attach(int id, size_t length, bool writable, std::shared_ptr<const Attachment>* out,
             rdv_transport_error_t* error);
  void Clear();

 private:
  struct Entry {
    int id;
    bool writable;
    std::shared_ptr<const Attachment> attachment;
  };
  // Detaches segments no one else has attached any more (their owner freed
  // them or exited), so that their memory goes. mu_ held.
  void DropAbandoned();

  std::mutex mu_;
  std::list<Entry> entries_;  // mu_: the most recently used first
};

}  // namespace rdv::ucx_plugin
