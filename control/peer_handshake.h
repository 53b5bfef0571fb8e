// A consumer learns from each producer's Handshake, in the background, how
// the producer moves payloads (TransferOp), so that a blocking Recv asks
// for a one-message answer only where that saves a call. A Recv never
// waits for it: until the answer comes, the Recv streams, which serves
// every route.
#pragma once

#include <memory>
#include <string>

#include "rdv/control/worker.pb.h"
#include "control/worker_cache.h"

namespace rdv::control {

// Starts `worker`'s Handshake with `request` (this worker's own words)
// unless its answer is known or awaited; returns at once. The answer's
// transport named `transport_name` gives worker->transfer_op. A failed
// Handshake is asked again at a later call. The callback runs on a gRPC
// thread and holds the worker's CallsInFlight.
void LearnTransferOp(const std::shared_ptr<WorkerClient>& worker, const HandshakeRequest& request,
                     const std::string& transport_name);

// Whether a blocking Recv from `worker` may ask for a one-message answer:
// with protocol grpc always; with a data plane only once the producer is
// known to answer with a descriptor it need not send (op get).
bool OneMessageAnswers(const WorkerClient& worker, bool has_data_plane);

}  // namespace rdv::control
