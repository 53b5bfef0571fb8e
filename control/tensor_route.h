// How a value leaves a producer for one RecvTensor request, decided in one
// place; the tensor service's reactor carries the route out
// (control/tensor_service.cc). Whether the answer is then one message or a
// held value fetched later is the request's framing, not the route.
#pragma once

#include "control/data_plane.h"
#include "rdv/control/worker.pb.h"
#include "control/worker_stats.h"
#include "core/tensor.h"

namespace rdv::control {

enum class TensorRoute {
  // Host bytes in the answer's stream: protocol grpc, a dead or small
  // tensor, strings, or a consumer of another protocol.
  kStream,
  // A GPU tensor streamed through pinned memory, chunk by chunk.
  kStreamFromDevice,
  // A descriptor in the answer; the bytes move through the data plane, as
  // its transfer op says (the consumer gets them, or they are sent tagged).
  kOffer,
  // A GPU tensor the data plane cannot reach: copied whole into pinned
  // memory, then offered.
  kStageThenOffer,
  // A GPU tensor lent by CUDA IPC to a consumer on this host that asked.
  kLendByCudaIpc,
};

// `plane` is null for protocol grpc; `may_lend` is false once lending by
// CUDA IPC was tried and failed, so that the tensor takes the next route.
TensorRoute ChooseRoute(const RecvTensorRequest& request, const Tensor& value, bool is_dead,
                        const DataPlane* plane, bool may_lend);

// The path the stats count a value under once `route` carries it: a stream
// of one `chunk_bytes` message is inline; an offer of host memory goes by
// `offered_op` (the data plane's OpFor the value), of GPU memory by
// GPUDirect.
SentPath SentPathOf(TensorRoute route, const Tensor& value, bool is_dead, size_t chunk_bytes,
                    TransferOp offered_op);

}  // namespace rdv::control
