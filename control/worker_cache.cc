#include "control/worker_cache.h"

#include <grpcpp/create_channel.h>

#include <algorithm>
#include <grpcpp/security/credentials.h>

#include "control/protocol.h"
#include "control/security.h"
#include "control/tensor_codec.h"
#include "core/logging.h"

namespace rdv::control {

grpc::ChannelArguments PeerChannelArguments(const ControlOptions& options) {
  grpc::ChannelArguments args;
  const int half_timeout_ms =
      static_cast<int>(std::max<int64_t>(absl::ToInt64Milliseconds(options.peer_timeout) / 2, 50));
  // A producer's stream chunk is the largest message a worker reads; a
  // bigger one is refused by gRPC before it is buffered whole.
  args.SetMaxReceiveMessageSize(
      static_cast<int>(kMaxGrpcChunkBytes + TensorDecoder::kMaxMetaBytes + 4096));
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, half_timeout_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, half_timeout_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // gRPC also takes the minimum backoff as the time one connection attempt
  // may take (TCP and HTTP/2 handshake): a quarter of the peer timeout lets
  // a loaded or emulated host connect, and still retries a few times. A TLS
  // handshake (two more round trips and the key exchange on both sides)
  // gets half of it: under emulation a quarter of 2 s was seen to run out.
  const int attempt_ms = std::clamp(options.security.tls() ? half_timeout_ms : half_timeout_ms / 2,
                                    200, 5000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, attempt_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, attempt_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, std::max(attempt_ms, 1000));
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // One connection per peer and channel, not shared with other channels:
  // a worker's channels are independent of each other.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

WorkerCache::WorkerCache(ClusterSpec cluster, ControlOptions options)
    : options_(options), cluster_(std::move(cluster)) {}

void CallsInFlight::Begin() {
  std::lock_guard lock(mu_);
  ++count_;
}

void CallsInFlight::End() {
  std::lock_guard lock(mu_);
  if (--count_ == 0) none_.notify_all();
}

bool CallsInFlight::None() {
  std::lock_guard lock(mu_);
  return count_ == 0;
}

bool CallsInFlight::WaitForNone(absl::Duration timeout) {
  std::unique_lock lock(mu_);
  return none_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return count_ == 0; });
}

WorkerCache::~WorkerCache() {
  for (auto& [name, client] : clients_) retired_.push_back(client);
  for (const std::shared_ptr<WorkerClient>& client : retired_) {
    client->releases->Drain(options_.peer_timeout);
    if (!client->calls->WaitForNone(options_.peer_timeout)) {
      RDV_LOG(Warning) << "calls to " << client->worker_name << " still in flight at shutdown";
    }
  }
}

absl::StatusOr<std::shared_ptr<WorkerClient>> WorkerCache::Get(absl::string_view worker_name) {
  std::lock_guard lock(mu_);
  if (auto it = clients_.find(worker_name); it != clients_.end()) return it->second;
  RDV_ASSIGN_OR_RETURN(std::string address, cluster_.AddressOf(worker_name));
  auto client = std::make_shared<WorkerClient>();
  client->worker_name = std::string(worker_name);
  client->address = address;
  client->channel = CreateMemberChannel(address, options_.security, PeerChannelArguments(options_));
  client->stub = WorkerService::NewStub(client->channel);
  client->recv_tensor = std::make_unique<grpc::internal::RpcMethod>(
      kRecvTensorMethod, grpc::internal::RpcMethod::SERVER_STREAMING, client->channel);
  client->recv_tensor_one_message = std::make_unique<grpc::internal::RpcMethod>(
      kRecvTensorMethod, grpc::internal::RpcMethod::NORMAL_RPC, client->channel);
  client->releases = std::make_shared<ReleaseBatcher>(client->channel);
  client->max_tensor_bytes = options_.max_tensor_bytes;
  client->peer_timeout = options_.peer_timeout;
  client->watch = std::make_unique<PeerWatch>(client->channel, client->worker_name, address,
                                              options_.peer_timeout);
  clients_.emplace(worker_name, client);
  return client;
}

void WorkerCache::SetAddress(absl::string_view job, int task, std::string address) {
  std::lock_guard lock(mu_);
  cluster_.SetAddress(job, task, std::move(address));
  if (auto it = clients_.find(ClusterSpec::WorkerName(job, task)); it != clients_.end()) {
    retired_.push_back(std::move(it->second));
    clients_.erase(it);
  }
  // Let go here, on the caller's thread, of the ones nobody uses any more:
  // no call, transfer or ack holds them.
  std::erase_if(retired_, [](const std::shared_ptr<WorkerClient>& client) {
    return client.use_count() == 1 && client->calls->None() && client->releases->Idle();
  });
}

std::vector<std::shared_ptr<WorkerClient>> WorkerCache::Clients() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<WorkerClient>> clients;
  for (const auto& [name, client] : clients_) clients.push_back(client);
  return clients;
}

ClusterSpec WorkerCache::cluster() const {
  std::lock_guard lock(mu_);
  return cluster_;
}

}  // namespace rdv::control
