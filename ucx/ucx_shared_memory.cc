#include "ucx/ucx_shared_memory.h"

#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "plugin/plugin_support.h"

namespace rdv::ucx_plugin {

using plugin_support::SetError;

namespace {

// Maps every page of `length` bytes at `address` now, in one call, where
// touching them one by one would fault once per 4 KiB page: the segment's
// pages are not huge (shmem_enabled is `never` by default), and faults are
// dear (docs/configuration.md, "Shared-memory segments"). EINVAL: a kernel
// before 5.14, which lacks the advice; the pages then fault as they are
// touched.
int MapPagesNow(void* address, size_t length, bool writable) {
  const int advice = writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  if (madvise(address, length, advice) == 0 || errno == EINVAL) return 0;
  return errno;
}

}  // namespace

int AllocateSegment(size_t length, SharedSegment* out, rdv_transport_error_t* error) {
  const int id = shmget(IPC_PRIVATE, length, IPC_CREAT | 0600);
  if (id < 0) {
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED,
                    "shmget of %zu bytes: %s (see kernel.shmmax and kernel.shmall)", length,
                    std::strerror(errno));
  }
  void* address = shmat(id, nullptr, 0);
  const int attach_errno = errno;
  shmctl(id, IPC_RMID, nullptr);
  if (address == reinterpret_cast<void*>(-1)) {
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "shmat of a new segment: %s",
                    std::strerror(attach_errno));
  }
  if (const int populate_errno = MapPagesNow(address, length, /*writable=*/true)) {
    shmdt(address);
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED,
                    "the kernel could not back a shared-memory segment of %zu bytes: %s "
                    "(the host or this process's memory cgroup is short of memory)",
                    length, std::strerror(populate_errno));
  }
  *out = SharedSegment{address, length, id};
  return RDV_TRANSPORT_OK;
}

void FreeSegment(const SharedSegment& segment) { shmdt(segment.address); }

const IpcScope& ThisIpcScope() {
  static const IpcScope scope = [] {
    IpcScope made{};
    struct stat ns {};
    if (stat("/proc/self/ns/ipc", &ns) == 0) made.ipc_namespace = ns.st_ino;
    if (FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      if (std::fgets(made.boot_id, sizeof(made.boot_id), file) == nullptr) made.boot_id[0] = 0;
      std::fclose(file);
    }
    return made;
  }();
  return scope;
}

bool SameIpcScope(const IpcScope& other) {
  const IpcScope& self = ThisIpcScope();
  return self.boot_id[0] != 0 && self.ipc_namespace != 0 &&
         other.ipc_namespace == self.ipc_namespace &&
         std::memcmp(other.boot_id, self.boot_id, sizeof(self.boot_id)) == 0;
}

Attachment::~Attachment() { shmdt(const_cast<char*>(base)); }

int Attachments::Attach(int id, size_t length, bool writable,
                        std::shared_ptr<const Attachment>* out, rdv_transport_error_t* error) {
  std::unique_lock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->id == id && it->writable == writable && it->attachment->length >= length) {
      entries_.splice(entries_.begin(), entries_, it);
      *out = it->attachment;
      return RDV_TRANSPORT_OK;
    }
  }
  DropAbandoned();
  struct shmid_ds state {};
  if (shmctl(id, IPC_STAT, &state) != 0) {
    return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                    "the peer's shared-memory segment %d is gone (%s): its owner freed it or "
                    "exited", id, std::strerror(errno));
  }
  if (state.shm_segsz < length) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "the peer's shared-memory segment %d has %zu bytes, not the %zu its key "
                    "says", id, static_cast<size_t>(state.shm_segsz), length);
  }
  void* base = shmat(id, nullptr, writable ? 0 : SHM_RDONLY);
  if (base == reinterpret_cast<void*>(-1)) {
    return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                    "attaching the peer's shared-memory segment %d: %s", id,
                    std::strerror(errno));
  }
  auto attachment = std::make_shared<Attachment>();
  attachment->base = static_cast<const char*>(base);
  attachment->length = state.shm_segsz;
  entries_.push_front(Entry{id, writable, attachment});
  if (entries_.size() > kCapacity) entries_.pop_back();
  lock.unlock();
  // Outside the lock, as it takes as long as the segment is large. Advice
  // only: pages it could not map fault when the copy touches them.
  MapPagesNow(base, attachment->length, writable);
  *out = std::move(attachment);
  return RDV_TRANSPORT_OK;
}

void Attachments::DropAbandoned() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    struct shmid_ds state {};
    const bool abandoned = shmctl(it->id, IPC_STAT, &state) != 0 || state.shm_nattch <= 1;
    it = abandoned ? entries_.erase(it) : std::next(it);
  }
}

void Attachments::Clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
}

}  // namespace rdv::ucx_plugin
