// How much freed heap an rdv program (rdv-worker, rdv-bench) keeps, where
// glibc would give it back to the kernel at once.
//
// By default glibc returns free memory at the top of a heap once 128 KiB
// of it lie there, and maps each block over 128 KiB on its own until the
// program frees one. A producer that Sends a burst of values, then frees
// each value's record as a Recv takes it, crosses that line deterministically
// and returns the pages its next burst faults in again: on these virtual
// machines one such return held the producer's progress thread for 0.2 to
// 0.7 ms (docs/fast_path.md, "Eight Recvs in flight").
#pragma once

namespace rdv {

// Sets, from the start, the thresholds glibc's own adaptive rule reaches
// once the program has freed one 32 MiB block: blocks up to 32 MiB come
// from the heap, and up to 64 MiB of free heap stay with the process.
// Leaves glibc alone, and returns false, where the user set its settings
// (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_, or glibc.malloc in
// GLIBC_TUNABLES) or a sanitizer's allocator stands in for glibc's. Call
// it first thing in main, before threads start.
bool KeepFreedHeap();

}  // namespace rdv
