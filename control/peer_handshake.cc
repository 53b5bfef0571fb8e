#include "control/peer_handshake.h"

#include <utility>

#include <grpcpp/client_context.h>

#include "absl/time/clock.h"

namespace rdv::control {
namespace {

struct HandshakeCall {
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
  auto call = std::make_shared<HandshakeCall>();
  call->request = request;
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + worker->peer_timeout));
  worker->calls->Begin();
  worker->stub->async()->Handshake(
      &call->context, &call->request, &call->response,
      [call, client = worker, calls = worker->calls, transport_name](grpc::Status status) mutable {
        Learn(*client, status, call->response, transport_name);
        // Never the last reference here: the cache keeps its own until the
        // calls it counts have ended.
        client.reset();
        calls->End();
      });
}

bool OneMessageAnswers(const WorkerClient& worker, bool has_data_plane) {
  return !has_data_plane || worker.transfer_op.load() == TRANSFER_OP_GET;
}

}  // namespace rdv::control
