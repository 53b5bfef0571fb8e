#include "control/driver_service.h"

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/protocol.h"
#include "control/tensor_pattern.h"
#include "core/device_copy.h"

namespace rdv::control {

DriverServiceImpl::DriverServiceImpl(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr,
                                     const TensorService& tensors)
    : env_(env), rendezvous_mgr_(rendezvous_mgr), tensors_(tensors) {}

grpc::ServerUnaryReactor* DriverServiceImpl::Produce(grpc::CallbackServerContext* context,
                                                     const ProduceRequest* request,
                                                     ProduceResponse*) {
  if (absl::Status denied = Admit(*context); !denied.ok()) return Reply(context, denied);
  return Reply(context, SendPatterns(*request));
}

grpc::ServerUnaryReactor* DriverServiceImpl::FetchBytes(grpc::CallbackServerContext* context,
                                                        const FetchBytesRequest* request,
                                                        FetchBytesResponse* response) {
  if (absl::Status denied = Admit(*context); !denied.ok()) return Reply(context, denied);
  if (request->size() > kMaxGrpcChunkBytes) {
    return Reply(context, absl::InvalidArgumentError(absl::StrCat(
                              "FetchBytes of ", request->size(), " bytes; the most is ",
                              kMaxGrpcChunkBytes)));
  }
  response->set_payload(Bytes(request->size()));
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* DriverServiceImpl::Holdings(grpc::CallbackServerContext* context,
                                                      const HoldingsRequest*,
                                                      HoldingsResponse* response) {
  if (absl::Status denied = Admit(*context); !denied.ok()) return Reply(context, denied);
  tensors_.CountHoldings(response);
  for (const std::shared_ptr<WorkerClient>& worker : env_.worker_cache->Clients()) {
    if (worker->watch->WatchingReached()) {
      response->set_watched_workers_reached(response->watched_workers_reached() + 1);
    }
  }
  return Reply(context, absl::OkStatus());
}

absl::Status DriverServiceImpl::SendPatterns(const ProduceRequest& request) {
  std::shared_ptr<Rendezvous> rendezvous = rendezvous_mgr_.Find(request.step_id());
  for (const ProduceItem& item : request.items()) {
    RDV_ASSIGN_OR_RETURN(const ParsedKey key, ParsedKey::Parse(item.rendezvous_key()));
    Tensor tensor;
    if (!item.is_dead()) {
      RDV_ASSIGN_OR_RETURN(tensor, PatternTensor(item, key));
    }
    RDV_RETURN_IF_ERROR(rendezvous->Send(key, {}, tensor, item.is_dead()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DriverServiceImpl::PatternTensor(const ProduceItem& item,
                                                        const ParsedKey& key) {
  RDV_ASSIGN_OR_RETURN(const DType dtype, DTypeFromEnumValue(item.dtype()));
  const std::vector<int64_t> dims(item.dims().begin(), item.dims().end());
  RDV_ASSIGN_OR_RETURN(const TensorShape shape, TensorShape::Create(dims));
  RDV_ASSIGN_OR_RETURN(const size_t bytes, TensorBytes(dtype, shape.num_elements()));
  if (bytes > env_.options.max_tensor_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("Produce of a ", bytes,
                                                   "-byte tensor; the most is ",
                                                   env_.options.max_tensor_bytes,
                                                   " (RDV_MAX_TENSOR_BYTES)"));
  }
  const MemoryLocation where =
      key.src().IsGpu() ? MemoryLocation::Cuda(key.src().id) : MemoryLocation::Host();
  std::lock_guard lock(mu_);
  Tensor& cached = pattern_tensors_[{item.dtype(), dims, item.seed(), where.ToString()}];
  if (!cached.IsInitialized()) {
    // From the data plane's memory, as a producer that allocates its
    // outputs from rdv's allocator would.
    RDV_ASSIGN_OR_RETURN(cached, MakePatternTensor(dtype, shape, item.seed(),
                                                   env_.data_plane ? env_.data_plane->allocator()
                                                                   : HostAllocator()));
    if (!where.is_host()) {
      RDV_ASSIGN_OR_RETURN(cached, CopyTensor(cached, where));
    }
  }
  return cached;
}

const std::string& DriverServiceImpl::Bytes(uint64_t size) {
  std::lock_guard lock(mu_);
  std::string& bytes = byte_payloads_[size];
  if (bytes.size() != size) bytes.assign(size, 'r');
  return bytes;
}

}  // namespace rdv::control
