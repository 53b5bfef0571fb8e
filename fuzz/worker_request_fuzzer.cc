// Every request the worker serves to its peers, on any bytes that parse as
// one, sent to a real worker on loopback through gRPC: the server's own
// validation answers each with a status; the worker never crashes, never
// hangs (every call has a deadline) and keeps serving. The first byte
// picks the RPC. RegisterGraph and RunGraph have the graph loader's fuzzer
// (a member's graph may rightly ask for any amount of work).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/time/clock.h"
#include "control/protocol.h"
#include "rdv/control/worker.grpc.pb.h"
#include "control/worker_server.h"

namespace {

using rdv::control::WorkerService;

struct Peer {
  std::unique_ptr<rdv::control::WorkerServer> worker;
  std::unique_ptr<WorkerService::Stub> stub;
};

Peer& ThePeer() {
  static Peer* peer = [] {
    rdv::control::WorkerServerOptions options;
    options.cluster = *rdv::control::ClusterSpec::FromFlag("worker=127.0.0.1:1,127.0.0.1:1");
    options.control.max_tensor_bytes = 16 << 20;
    options.control.peer_timeout = absl::Milliseconds(200);
    absl::StatusOr<std::unique_ptr<rdv::control::WorkerServer>> worker =
        rdv::control::WorkerServer::Start(options);
    if (!worker.ok()) std::abort();
    auto* made = new Peer;
    made->worker = *std::move(worker);
    made->stub = WorkerService::NewStub(
        grpc::CreateChannel(made->worker->address(), grpc::InsecureChannelCredentials()));
    return made;
  }();
  return *peer;
}

template <typename Request, typename Response, typename Method>
void Call(Method method, const uint8_t* data, size_t size) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(100)));
  Response response;
  (void)(ThePeer().stub.get()->*method)(&context, request, &response);
}

void RecvTensor(const uint8_t* data, size_t size) {
  rdv::control::RecvTensorRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  // Past the version check, unless the input names a version of its own.
  if (request.protocol_version() == 0) {
    request.set_protocol_version(rdv::control::kProtocolVersion);
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(100)));
  auto reader = ThePeer().stub->RecvTensor(&context, request);
  rdv::control::RecvTensorChunk chunk;
  while (reader->Read(&chunk)) {
  }
  (void)reader->Finish();
}

}  // namespace

// Protobuf reports every string field that is not UTF-8 on stderr; a peer
// may send such bytes, and the fuzzer would spend its time printing.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace rdv::control;
  const uint8_t* request = data + 1;
  const size_t length = size - 1;
  switch (data[0] % 6) {
    case 0:
      Call<HandshakeRequest, HandshakeResponse>(&WorkerService::Stub::Handshake, request, length);
      break;
    case 1:
      RecvTensor(request, length);
      break;
    case 2:
      Call<ReleaseTransfersRequest, ReleaseTransfersResponse>(
          &WorkerService::Stub::ReleaseTransfers, request, length);
      break;
    case 3:
      Call<CleanupStepRequest, CleanupStepResponse>(&WorkerService::Stub::CleanupStep, request,
                                                    length);
      break;
    case 4:
      Call<AbortStepRequest, AbortStepResponse>(&WorkerService::Stub::AbortStep, request, length);
      break;
    default:
      Call<WithdrawRecvTensorRequest, WithdrawRecvTensorResponse>(
          &WorkerService::Stub::WithdrawRecvTensor, request, length);
      break;
  }
  return 0;
}
