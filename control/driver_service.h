// A worker's DriverService, for tests and benchmarks only (served when
// WorkerServerOptions::enable_driver): Produce makes this worker Send
// pattern tensors, FetchBytes answers with bytes (the raw gRPC peer in
// rdv-bench), Holdings counts what the worker keeps for its consumers.
//
// Thread-safe; pattern tensors and payloads are made once and kept until
// the worker goes.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "control/rendezvous_mgr.h"
#include "control/security.h"
#include "control/tensor_service.h"
#include "rdv/control/worker.grpc.pb.h"
#include "control/worker_env.h"

namespace rdv::control {

class DriverServiceImpl final : public DriverService::CallbackService {
 public:
  // Everything passed outlives this.
  DriverServiceImpl(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr,
                    const TensorService& tensors);

  grpc::ServerUnaryReactor* Produce(grpc::CallbackServerContext* context,
                                    const ProduceRequest* request, ProduceResponse*) override;
  grpc::ServerUnaryReactor* FetchBytes(grpc::CallbackServerContext* context,
                                       const FetchBytesRequest* request,
                                       FetchBytesResponse* response) override;
  grpc::ServerUnaryReactor* Holdings(grpc::CallbackServerContext* context,
                                     const HoldingsRequest*,
                                     HoldingsResponse* response) override;

 private:
  // The door (control/security.h), as every worker RPC has it.
  absl::Status Admit(const grpc::CallbackServerContext& context) const {
    return AdmitCaller(context, env_.options.security);
  }
  // Sends the pattern tensors the request names, on its step.
  absl::Status SendPatterns(const ProduceRequest& request);
  // The driver's tensor for `item`, made once.
  absl::StatusOr<Tensor> PatternTensor(const ProduceItem& item, const ParsedKey& key);
  const std::string& Bytes(uint64_t size);

  const WorkerEnv& env_;
  RendezvousMgr& rendezvous_mgr_;
  const TensorService& tensors_;

  std::mutex mu_;
  // Made once per (dtype, dims, seed, memory location) and sent many times.
  std::map<std::tuple<int, std::vector<int64_t>, uint32_t, std::string>, Tensor>
      pattern_tensors_;                            // mu_
  std::map<uint64_t, std::string> byte_payloads_;  // mu_
};

}  // namespace rdv::control
