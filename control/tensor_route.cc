#include "control/tensor_route.h"

#include "control/cuda_ipc_transfer.h"

namespace rdv::control {
namespace {

// The payload moves through the data plane instead of the stream.
bool ThroughDataPlane(const RecvTensorRequest& request, const Tensor& value, bool is_dead,
                      const DataPlane* plane) {
  return plane != nullptr && request.protocol() == plane->protocol() && !is_dead &&
         value.IsInitialized() && DTypeIsMemcpyable(value.dtype()) &&
         value.TotalBytes() > plane->options().inline_bytes;
}

}  // namespace

TensorRoute ChooseRoute(const RecvTensorRequest& request, const Tensor& value, bool is_dead,
                        const DataPlane* plane, bool may_lend) {
  const bool through_plane = ThroughDataPlane(request, value, is_dead, plane);
  const bool on_device = !is_dead && value.IsInitialized() && !value.location().is_host();
  if (!on_device) return through_plane ? TensorRoute::kOffer : TensorRoute::kStream;
  if (may_lend && CudaIpcWanted(request, value)) return TensorRoute::kLendByCudaIpc;
  if (!through_plane) return TensorRoute::kStreamFromDevice;
  return plane->MovesCudaMemory() ? TensorRoute::kOffer : TensorRoute::kStageThenOffer;
}

SentPath SentPathOf(TensorRoute route, const Tensor& value, bool is_dead, size_t chunk_bytes,
                    TransferOp offered_op) {
  switch (route) {
    case TensorRoute::kStream:
      return is_dead || value.TotalBytes() <= chunk_bytes ? SentPath::kInline : SentPath::kStream;
    case TensorRoute::kOffer:
      if (!value.location().is_host()) return SentPath::kGpuDirect;
      return offered_op == TRANSFER_OP_TAG ? SentPath::kTransportTag : SentPath::kTransportGet;
    case TensorRoute::kStreamFromDevice:
    case TensorRoute::kStageThenOffer:
      return SentPath::kStaged;
    case TensorRoute::kLendByCudaIpc:
      return SentPath::kCudaIpc;
  }
  return SentPath::kStream;
}

}  // namespace rdv::control
