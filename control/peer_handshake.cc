#include "control/peer_handshake.h"

#include <utility>

#include <grpcpp/client_context.h>

#include "absl/time/clock.h"

namespace rdv::control {
namespace {

// Members go in reverse order: the context, which holds a reference to the
// worker's channel, before the count ends. Once it ends, the worker cache
// may let the worker go, and the last reference to a channel must not go
// on gRPC's own thread (destroying a channel there frees what that thread
// still uses).
struct HandshakeCall {
  explicit HandshakeCall(std::shared_ptr<CallsInFlight> calls) : counted(std::move(calls)) {}
  CountedCall counted;  // first: ends last
  grpc::ClientContext context;
  HandshakeRequest request;
  HandshakeResponse response;
};

void Learn(WorkerClient& worker, const grpc::Status& status, const HandshakeResponse& response,
           const std::string& transport_name) {
  if (!status.ok()) {
    worker.handshake_started.store(false);  // ask again at a later call
    return;
  }
  for (const TransportAddress& transport : response.transports()) {
    if (transport.name() == transport_name) {
      worker.transfer_op.store(transport.transfer_op());
      return;
    }
  }
  // The peer answered without our transport: its payloads come in the
  // stream, and streaming serves that.
}

}  // namespace

void LearnTransferOp(const std::shared_ptr<WorkerClient>& worker, const HandshakeRequest& request,
                     const std::string& transport_name) {
  if (worker->transfer_op.load() != TRANSFER_OP_UNSPECIFIED ||
      worker->handshake_started.exchange(true)) {
    return;
  }
  auto call = std::make_shared<HandshakeCall>(worker->calls);
  call->request = request;
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + worker->peer_timeout));
  // The callback holds the worker weakly and the call (context, count)
  // strongly: whichever copy of it gRPC destroys last ends the count.
  worker->stub->async()->Handshake(
      &call->context, &call->request, &call->response,
      [call, weak = std::weak_ptr<WorkerClient>(worker), transport_name](grpc::Status status) {
        if (std::shared_ptr<WorkerClient> client = weak.lock()) {
          Learn(*client, status, call->response, transport_name);
        }
      });
}

bool OneMessageAnswers(const WorkerClient& worker, bool has_data_plane) {
  return !has_data_plane || worker.transfer_op.load() == TRANSFER_OP_GET;
}

}  // namespace rdv::control
