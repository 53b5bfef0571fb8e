// Which tensors the UCX plugin's memory `mapped` puts in System V segments;
// the cross-process tests read it too, to know which values are lent.
#pragma once

#include <cstddef>

namespace rdv::ucx_plugin {

// Memory `mapped` gives segments to tensors of at least this size, where a
// copy's speed shows, and to at most this many at once: System V segments
// are few per host (kernel.shmmni, 4096 by default), and UCX's own sysv
// transport needs some. Other tensors take anonymous memory.
inline constexpr size_t kMinSegmentBytes = size_t{256} << 10;
inline constexpr int kMaxSegments = 512;

}  // namespace rdv::ucx_plugin
