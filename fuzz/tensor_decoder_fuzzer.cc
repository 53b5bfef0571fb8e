// TensorDecoder on any stream of chunks: what a producer answers to a
// RecvTensor. Two bytes (little-endian) before each chunk say how long it
// is; the decoder accepts, or refuses with a status, never crashes, never
// writes outside the tensor and never allocates beyond its limit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <grpcpp/support/byte_buffer.h>

#include "control/tensor_codec.h"

namespace {

// Small enough for libFuzzer's malloc limit: a larger tensor is refused.
constexpr uint64_t kMaxTensorBytes = 16 << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdv::control::TensorDecoder decoder({}, kMaxTensorBytes);
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t length = std::min<size_t>(data[at] | size_t{data[at + 1]} << 8, size - at - 2);
    at += 2;
    grpc::Slice slice(data + at, length);
    grpc::ByteBuffer chunk(&slice, 1);
    at += length;
    if (!decoder.Consume(&chunk).ok()) return 0;
    if (decoder.received_bytes() > kMaxTensorBytes) std::abort();
  }
  absl::StatusOr<rdv::Tensor> tensor = decoder.Finish();
  // A dead tensor keeps its dtype and shape, in host memory within the
  // limit, and nothing else.
  if (tensor.ok() && decoder.meta().is_dead() && tensor->IsInitialized() &&
      (static_cast<int>(tensor->dtype()) != decoder.meta().dtype() ||
       tensor->TotalBytes() > kMaxTensorBytes || !tensor->location().is_host())) {
    std::abort();
  }
  return 0;
}
