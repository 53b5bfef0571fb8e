// Where a buffer's bytes live.
#pragma once

#include <string>

namespace rdv {

enum class MemoryKind {
  kHost,         // pageable host memory
  kPinnedHost,   // page-locked host memory, usable by DMA engines
  kCudaDevice,   // memory of CUDA device `device`
};

struct MemoryLocation {
  MemoryKind kind = MemoryKind::kHost;
  int device = 0;  // CUDA ordinal; 0 and unused for host kinds

  static MemoryLocation Host() { return {MemoryKind::kHost, 0}; }
  static MemoryLocation PinnedHost() { return {MemoryKind::kPinnedHost, 0}; }
  static MemoryLocation Cuda(int device) { return {MemoryKind::kCudaDevice, device}; }

  // The CPU can read and write it directly.
  bool is_host() const { return kind != MemoryKind::kCudaDevice; }

  // "host", "pinned-host", "cuda:0".
  std::string ToString() const;

  friend bool operator==(const MemoryLocation& a, const MemoryLocation& b) {
    return a.kind == b.kind && a.device == b.device;
  }
};

}  // namespace rdv
