#include "control/data_plane.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/cuda.h"
#include "core/logging.h"

namespace rdv::control {
absl::StatusOr<std::unique_ptr<DataPlane>> DataPlane::Create(absl::string_view protocol,
                                                             DataPlaneOptions options) {
  absl::string_view name = protocol;
  if (!absl::ConsumePrefix(&name, "grpc+") || name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol '", protocol, "': expected grpc or grpc+<transport>"));
  }
  auto sink = std::make_shared<MessageSink>();
  RDV_ASSIGN_OR_RETURN(
      std::shared_ptr<plugin::Transport> transport,
      plugin::Transport::Load(name, options.transport_settings, [sink](absl::string_view message) {
        std::lock_guard lock(sink->mu);
        if (sink->handler != nullptr) sink->handler(message);
      }));
  std::unique_ptr<DataPlane> plane(
      new DataPlane(std::string(protocol), options, std::move(transport), std::move(sink)));
  RDV_ASSIGN_OR_RETURN(plane->local_address_, plane->transport_->LocalAddress());
  if (plane->MovesCudaMemory()) {
    RDV_LOG(Info) << protocol << ": GPU tensors move by GPUDirect, registered in place";
  } else if (cuda::DeviceCount() > 0) {
    RDV_LOG(Warning) << protocol << ": GPU tensors stage through pinned host memory (CUDA IPC "
                     << "aside): the transport reaches host memory only ("
                     << plane->transport_->description() << ")";
  }
  return plane;
}

DataPlane::DataPlane(std::string protocol, DataPlaneOptions options,
                     std::shared_ptr<plugin::Transport> transport,
                     std::shared_ptr<MessageSink> sink)
    : protocol_(std::move(protocol)),
      options_(options),
      transport_(std::move(transport)),
      transfer_op_(transport_->preferred_op() == RDV_TRANSPORT_OP_TAG ? TRANSFER_OP_TAG
                                                                       : TRANSFER_OP_GET),
      allocator_(std::make_shared<plugin::TransportAllocator>(transport_, options.pool_cache_bytes)),
      registrations_(transport_, allocator_, options.registration_cache_bytes),
      sink_(std::move(sink)),
      endpoints_(transport_) {}

void DataPlane::SetMessageSink(plugin::MessageHandler sink) {
  std::lock_guard lock(sink_->mu);
  sink_->handler = std::move(sink);
}

void DataPlane::SendMessage(const std::string& address, std::string message,
                            plugin::TransportDone done) {
  endpoints_.With(address, [this, message = std::move(message), done = std::move(done)](
                               absl::StatusOr<EndpointCache::Endpoint> endpoint) mutable {
    if (!endpoint.ok()) {
      std::move(done)(endpoint.status());
      return;
    }
    transport_->SendMessage(**endpoint, message,
                            [endpoint = *endpoint, done = std::move(done)](
                                absl::Status status) mutable { std::move(done)(status); });
  });
}

TransportAddress DataPlane::Describe() const {
  TransportAddress described;
  described.set_name(transport_->name());
  described.set_address(local_address_);
  described.set_transfer_op(transfer_op_);
  return described;
}

TransferOp DataPlane::OpFor(const Tensor& tensor) const {
  return transfer_op_ == TRANSFER_OP_GET || ReadByPeerCopy(tensor) ? TRANSFER_OP_GET
                                                                    : TRANSFER_OP_TAG;
}

bool DataPlane::ReadByPeerCopy(const Tensor& tensor) const {
  if (!tensor.location().is_host() || tensor.TotalBytes() == 0) return false;
  const plugin::TransportMemory* memory = allocator_->Find(tensor.data(), tensor.TotalBytes());
  return memory != nullptr && memory->read_by_peer_copy();
}

std::optional<Tensor> DataPlane::AllocatePeerReadable(DType dtype,
                                                      const TensorShape& shape) const {
  const size_t from = transport_->peer_copy_from_bytes();
  const absl::StatusOr<size_t> bytes = TensorBytes(dtype, shape.num_elements());
  if (from == 0 || !bytes.ok() || *bytes < from) return std::nullopt;
  absl::StatusOr<Tensor> made = Tensor::Allocate(allocator_, dtype, shape);
  if (!made.ok() || !ReadByPeerCopy(*made)) return std::nullopt;
  return *std::move(made);
}

DataPlane::~DataPlane() {
  held_.Clear();
  endpoints_.Shutdown();
}

absl::StatusOr<TransportDescriptor> DataPlane::Offer(TransferOp op, int64_t step_id,
                                                     int64_t request_id,
                                                     const Tensor& tensor,
                                                     absl::string_view consumer_address,
                                                     const ConsumerWatcher& consumer,
                                                     plugin::TransportDone sent) {
  TransportDescriptor descriptor;
  descriptor.set_op(op);
  descriptor.set_length(tensor.TotalBytes());
  descriptor.set_producer_transport_address(local_address_);
  if (descriptor.op() == TRANSFER_OP_TAG) {
    if (consumer_address.empty()) {
      return absl::InvalidArgumentError("RecvTensor without the consumer's transport address");
    }
    descriptor.set_transfer_id(static_cast<uint64_t>(request_id));
    SendTagged(tensor, descriptor.transfer_id(), std::string(consumer_address), consumer,
               std::move(sent));
    return descriptor;
  }
  RDV_ASSIGN_OR_RETURN(plugin::Registration registration, registrations_.Lookup(tensor.buffer()));
  descriptor.set_address(reinterpret_cast<uint64_t>(tensor.data()));
  descriptor.set_remote_key(registration.memory->remote_key());
  descriptor.set_transfer_id(
      held_.Hold(step_id, tensor, std::move(registration.hold), consumer));
  std::move(sent)(absl::OkStatus());
  return descriptor;
}

void DataPlane::SendTagged(Tensor tensor, uint64_t tag, const std::string& address,
                           ConsumerWatcher consumer, plugin::TransportDone sent) {
  const void* data = tensor.data();
  const size_t length = tensor.TotalBytes();
  SendToConsumer(std::move(tensor), nullptr, address, std::move(consumer),
                 [this, data, length, tag](const EndpointCache::Endpoint& endpoint,
                                           plugin::TransportDone done) {
                   transport_->Send(*endpoint, data, length, tag, std::move(done));
                 },
                 std::move(sent));
}

void DataPlane::Put(const Tensor& tensor, const std::string& consumer_address,
                    uint64_t remote_address, std::string remote_key,
                    const ConsumerWatcher& consumer, plugin::TransportDone written) {
  PutThenMessage(tensor, consumer_address, remote_address, std::move(remote_key), consumer, "",
                 std::move(written));
}

void DataPlane::PutThenMessage(const Tensor& tensor, const std::string& consumer_address,
                               uint64_t remote_address, std::string remote_key,
                               const ConsumerWatcher& consumer, std::string message,
                               plugin::TransportDone written) {
  absl::StatusOr<plugin::Registration> local = registrations_.Lookup(tensor.buffer());
  if (!local.ok()) {
    std::move(written)(local.status());
    return;
  }
  const size_t length = tensor.TotalBytes();
  SendToConsumer(tensor, local->hold, consumer_address, consumer,
                 [this, data = tensor.data(), memory = local->memory, remote_address,
                  remote_key = std::move(remote_key), length, message = std::move(message)](
                     const EndpointCache::Endpoint& endpoint, plugin::TransportDone done) {
                   // A put refused before it was posted (a malformed key)
                   // leaves the endpoint in service: its message must not
                   // follow. One that fails later fails the endpoint, and
                   // the message with it.
                   auto put_failed = std::make_shared<std::atomic<bool>>(false);
                   transport_->Put(*endpoint, data, *memory, remote_address, remote_key, length,
                                   [put_failed, done = std::move(done)](absl::Status status) mutable {
                                     if (!status.ok()) put_failed->store(true);
                                     std::move(done)(std::move(status));
                                   });
                   if (message.empty() || put_failed->load()) return;
                   transport_->SendMessage(*endpoint, message, [endpoint](absl::Status sent) {
                     if (!sent.ok()) RDV_LOG(Debug) << "the message after a put: " << sent;
                   });
                 },
                 std::move(written));
}

void DataPlane::SendToConsumer(Tensor tensor, std::shared_ptr<const void> hold,
                               const std::string& address, ConsumerWatcher consumer,
                               PostToConsumer post, plugin::TransportDone sent) {
  sends_in_flight_->fetch_add(1);
  endpoints_.With(address, [this, tensor = std::move(tensor), hold = std::move(hold), address,
                            consumer = std::move(consumer), post = std::move(post),
                            in_flight = sends_in_flight_, sent = std::move(sent)](
                               absl::StatusOr<EndpointCache::Endpoint> endpoint) mutable {
    if (!endpoint.ok()) {
      in_flight->fetch_sub(1);
      std::move(sent)(endpoint.status());
      return;
    }
    ConsumerLease lease = consumer.Lease([weak = std::weak_ptr(*endpoint)]() {
      if (EndpointCache::Endpoint lost = weak.lock()) lost->Abort();
    });
    // Any failure leaves the endpoint out of service: a send or a put has
    // no cancel but an abort.
    std::move(post)(*endpoint, [this, endpoint = *endpoint, tensor = std::move(tensor),
                                 hold = std::move(hold), lease = std::move(lease), in_flight,
                                 address, sent = std::move(sent)](absl::Status status) mutable {
      in_flight->fetch_sub(1);
      if (!status.ok()) endpoints_.Forget(address);
      std::move(sent)(std::move(status));
    });
  });
}

absl::StatusOr<std::unique_ptr<plugin::TransportMemory>> DataPlane::ExposeForPut(
    const Tensor& destination) {
  put_exposures_.fetch_add(1, std::memory_order_relaxed);
  put_bytes_exposed_.fetch_add(static_cast<int64_t>(destination.TotalBytes()),
                                std::memory_order_relaxed);
  return transport_->Register(destination.data(), std::max<size_t>(destination.TotalBytes(), 1),
                              destination.location());
}

plugin::TransportDone DataPlane::TakeAwaitedPut(uint64_t transfer_id) {
  std::lock_guard lock(puts_mu_);
  auto it = puts_awaited_.find(transfer_id);
  if (it == puts_awaited_.end()) return nullptr;
  plugin::TransportDone done = std::move(it->second);
  puts_awaited_.erase(it);
  return done;
}

bool DataPlane::Landed(uint64_t transfer_id) {
  plugin::TransportDone done = TakeAwaitedPut(transfer_id);
  if (!done) return false;
  std::move(done)(absl::OkStatus());
  return true;
}

absl::Status DataPlane::Release(const ReleasedTransfer& transfer) {
  return held_.Release(transfer);
}

void DataPlane::DropStep(int64_t step_id) { held_.DropStep(step_id); }

void DataPlane::DropAllHeld() {
  held_.Clear();
  absl::flat_hash_map<uint64_t, plugin::TransportDone> awaited;
  {
    std::lock_guard lock(puts_mu_);
    awaited.swap(puts_awaited_);
  }
  for (auto& [id, done] : awaited) {
    std::move(done)(absl::CancelledError("the worker is shutting down"));
  }
  endpoints_.Shutdown();
}

void DataPlane::Fetch(const TransportDescriptor& descriptor, Tensor destination,
                      plugin::TransportDone done) {
  if (destination.TotalBytes() != descriptor.length()) {
    std::move(done)(absl::DataLossError(absl::StrCat("the producer describes ",
                                                     descriptor.length(), " bytes for a tensor of ",
                                                     destination.TotalBytes())));
    return;
  }
  const std::string& address = descriptor.producer_transport_address();
  fetches_in_flight_->fetch_add(1);
  // The destination stays alive until the transport is done with it.
  // A failed transfer may leave its endpoint out of service (a verbs QP in
  // the error state): the next transfer connects anew.
  auto on_done = [this, address, destination, in_flight = fetches_in_flight_,
                  done = std::move(done)](absl::Status status) mutable {
    in_flight->fetch_sub(1);
    if (!status.ok() && !absl::IsCancelled(status)) endpoints_.Forget(address);
    // Let go first: the Recv may end, and its next one allocate, before
    // the transport drops this callback.
    destination = Tensor();
    std::move(done)(std::move(status));
  };
  if (descriptor.op() == TRANSFER_OP_TAG) {
    transport_->Recv(destination.data(), destination.TotalBytes(), descriptor.transfer_id(),
                     std::move(on_done));
    return;
  }
  if (descriptor.op() == TRANSFER_OP_PUT) {
    std::lock_guard lock(puts_mu_);
    puts_awaited_.insert_or_assign(descriptor.transfer_id(), std::move(on_done));
    return;
  }
  absl::StatusOr<plugin::Registration> local = LocalMemory(destination);
  if (!local.ok()) {
    std::move(on_done)(local.status());
    return;
  }
  endpoints_.With(address, [this, into = destination.data(), local = *std::move(local),
                            remote_address = descriptor.address(),
                            remote_key = descriptor.remote_key(), length = descriptor.length(),
                            on_done = std::move(on_done)](
                               absl::StatusOr<EndpointCache::Endpoint> endpoint) mutable {
    if (!endpoint.ok()) {
      std::move(on_done)(endpoint.status());
      return;
    }
    transport_->Get(**endpoint, into, *local.memory, remote_address, remote_key, length,
                    [endpoint = *endpoint, hold = local.hold,
                     on_done = std::move(on_done)](absl::Status status) mutable {
                      std::move(on_done)(std::move(status));
                    });
  });
}

void DataPlane::CancelFetch(const TransportDescriptor& descriptor, bool producer_lost) {
  if (descriptor.op() == TRANSFER_OP_TAG) {
    // NOT_FOUND: it ended, or its bytes are arriving and end it soon (with
    // an error if the sender is lost: UCX's tcp endpoints notice).
    transport_->CancelRecv(descriptor.transfer_id()).IgnoreError();
  }
  if (descriptor.op() == TRANSFER_OP_PUT) {
    plugin::TransportDone awaited = TakeAwaitedPut(descriptor.transfer_id());
    if (awaited) std::move(awaited)(absl::CancelledError("the write it waited for was cancelled"));
  }
  if (producer_lost) endpoints_.PeerLost(descriptor.producer_transport_address());
}

absl::StatusOr<plugin::Registration> DataPlane::LocalMemory(const Tensor& destination) {
  if (destination.location().kind == MemoryKind::kCudaDevice) {
    return registrations_.Lookup(destination.buffer());
  }
  const plugin::TransportMemory* memory =
      allocator_->Find(destination.data(), destination.TotalBytes());
  // Else the caller's own buffer (RendezvousArgs::landing), registered on
  // first use and cached.
  if (memory == nullptr) return registrations_.Lookup(destination.buffer());
  return plugin::Registration{memory, nullptr};
}

std::shared_ptr<Allocator> DataPlane::ReceiveAllocator(MemoryLocation destination) const {
  if (destination.kind == MemoryKind::kCudaDevice && transport_->reaches_cuda_memory()) {
    if (absl::StatusOr<std::shared_ptr<Allocator>> device = cuda::DeviceAllocator(destination.device);
        device.ok()) {
      return *std::move(device);
    }
  }
  return allocator_;
}

bool DataPlane::MovesCudaMemory() const {
  return transport_->reaches_cuda_memory() && cuda::DeviceCount() > 0;
}

}  // namespace rdv::control
