// A worker's data plane for protocols grpc+<transport>: the loaded
// transport plugin, the host memory tensors are carved from, the
// registration cache, endpoints to peers, and the producer's table of
// transfers waiting for their consumer. Thread-safe.
//
// Producer: Offer() keeps a tensor (and its registration) alive under a
// transfer id and describes it; op tag also posts the send. Host tensors
// always; GPU tensors when MovesCudaMemory() (else the worker stages them). Release() (from
// the consumer's batched ReleaseTransfers) or the step's cleanup lets go.
// Consumer: Fetch() moves the described bytes into a destination tensor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "control/consumer_lease.h"
#include "control/endpoint_cache.h"
#include "control/held_transfers.h"
#include "control/options.h"
#include "rdv/control/worker.pb.h"
#include "core/tensor.h"
#include "plugin/registration_cache.h"
#include "plugin/transport.h"
#include "plugin/transport_allocator.h"

namespace rdv::control {

class DataPlane {
 public:
  // `protocol` is "grpc+<transport>"; loads librdv_transport_<transport>.so.
  static absl::StatusOr<std::unique_ptr<DataPlane>> Create(absl::string_view protocol,
                                                           DataPlaneOptions options);
  ~DataPlane();

  const std::string& protocol() const { return protocol_; }
  const DataPlaneOptions& options() const { return options_; }
  const plugin::Transport& transport() const { return *transport_; }
  const std::shared_ptr<plugin::TransportAllocator>& allocator() const { return allocator_; }
  plugin::RegistrationCacheStats registration_stats() const { return registrations_.stats(); }
  const std::string& local_address() const { return local_address_; }
  // How this worker's payloads leave it, decided once from the transport's
  // preference: the consumer gets them (op get) or this worker sends them
  // tagged (op tag).
  TransferOp transfer_op() const { return transfer_op_; }
  // How `tensor` leaves this worker: op get where transfer_op() is, or
  // where the transport lets peers read its memory by a copy of their own
  // (read_by_peer_copy: UCX's mapped segments between processes of one
  // host); else op tag.
  TransferOp OpFor(const Tensor& tensor) const;
  // `tensor` lies in this plane's pool, in memory peers read by a copy of
  // their own.
  bool ReadByPeerCopy(const Tensor& tensor) const;
  // A tensor from this plane's pool that peers read by a copy of their own,
  // for a sender to copy a value of its own into; nullopt where the pool
  // gives no such memory for it (another transport, a small size, the
  // segments used up). Allocates nothing where the transport never gives
  // such memory to this size (Transport::peer_copy_from_bytes), so a
  // sender may ask for every value. Thread-safe.
  std::optional<Tensor> AllocatePeerReadable(DType dtype, const TensorShape& shape) const;
  // This data plane as the Handshake tells peers of it.
  TransportAddress Describe() const;

  // Producer side, by `op` (OpFor(tensor), or tag where the consumer
  // posted a receive). `sent` runs once the producer's part is over: at
  // once for op get (the tensor then waits for Release), when the send ends
  // for op tag (sent under the consumer's `request_id`, unique on its
  // side).
  // When `consumer` says its consumer is lost, the tensor held for it goes
  // (op get), or the endpoint to it is aborted, which ends the send (op tag).
  absl::StatusOr<TransportDescriptor> Offer(TransferOp op, int64_t step_id, int64_t request_id,
                                            const Tensor& tensor,
                                            absl::string_view consumer_address,
                                            const ConsumerWatcher& consumer,
                                            plugin::TransportDone sent);
  // INVALID_ARGUMENT for a transfer this worker does not hold (unknown id,
  // another step, or a length that differs from what it described); OK for
  // one of a step cleaned up lately (its ack crossed the cleanup).
  absl::Status Release(const ReleasedTransfer& transfer);
  void DropStep(int64_t step_id);
  // At shutdown: frees every held transfer, ends the writes Fetches wait
  // for (CANCELLED), aborts every endpoint and stops connecting, so that sends no consumer will receive end (with an error)
  // and let go of their consumers' leases before the worker cache goes.
  void DropAllHeld();
  // Tensors offered for op get and not released yet.
  size_t transfers_held() const { return held_.size(); }

  // Messages (the fast path's requests and notices). The transport carries
  // them: both sides run protocol grpc+ucx (plugin ABI v3).
  bool carries_messages() const { return transport_->carries_messages(); }
  // Messages peers post to this worker's transport go to `sink`, on the
  // transport's progress thread; dropped while none is set. Clear it
  // (nullptr) before what it reaches goes: this waits for a delivery in
  // progress.
  void SetMessageSink(plugin::MessageHandler sink);
  // Posts `message` to the peer whose transport address is `address`;
  // `done` runs once, on the transport's or the connector's thread, or here.
  void SendMessage(const std::string& address, std::string message, plugin::TransportDone done);

  // Producer, op put (the fast path's writes): writes `tensor` at
  // `remote_address` of the consumer at `consumer_address`, reachable by
  // `remote_key`. `written` runs once the bytes are in the consumer's
  // memory (the transport's put completes remotely), or failed.
  void Put(const Tensor& tensor, const std::string& consumer_address, uint64_t remote_address,
           std::string remote_key, const ConsumerWatcher& consumer,
           plugin::TransportDone written);
  // Put, then `message` to the consumer on the same endpoint without
  // waiting for the put: for a transport whose messages_follow_puts(), the
  // message arrives only once the bytes have. A put that fails before it
  // returns sends no message. `written` runs as Put's does; a message that
  // was not sent is logged (the put's failure says why).
  void PutThenMessage(const Tensor& tensor, const std::string& consumer_address,
                      uint64_t remote_address, std::string remote_key,
                      const ConsumerWatcher& consumer, std::string message,
                      plugin::TransportDone written);
  bool messages_follow_puts() const { return transport_->messages_follow_puts(); }
  // Consumer, op put: `destination` registered on its own, so that the key
  // a producer gets reaches that tensor alone, and only while the returned
  // memory lives: its holder drops it when the transfer ends, which revokes
  // the producer's access where the transport can (verbs and UCX over
  // RDMA deregister; UCX over shared memory or tcp cannot).
  absl::StatusOr<std::unique_ptr<plugin::TransportMemory>> ExposeForPut(
      const Tensor& destination);
  // Destinations ExposeForPut registered, and their bytes.
  int64_t put_exposures() const { return put_exposures_.load(); }
  int64_t put_bytes_exposed() const { return put_bytes_exposed_.load(); }
  // The producer says the write into transfer `transfer_id` (a Fetch of op
  // put) landed: that Fetch ends OK. False when none waits.
  bool Landed(uint64_t transfer_id);

  // Consumer side: fills `destination` (from ReceiveAllocator, of
  // TotalBytes() == descriptor.length) and calls `done` on the transport's
  // thread. Op put waits for Landed or CancelFetch (on their threads).
  void Fetch(const TransportDescriptor& descriptor, Tensor destination,
             plugin::TransportDone done);
  // Ends a Fetch early: its tagged receive, if no send matched it yet, is
  // cancelled, and a write it waits for (op put) ends CANCELLED at once; with `producer_lost`, the endpoint to the producer is
  // aborted, which ends its gets (and any other transfer on it). The
  // Fetch's `done` still runs, once, when the transport lets go.
  void CancelFetch(const TransportDescriptor& descriptor, bool producer_lost);
  // Where a tensor bound for `destination` is received: that GPU's memory
  // when the transport reaches it (GPUDirect), else the host pool.
  std::shared_ptr<Allocator> ReceiveAllocator(MemoryLocation destination) const;
  // GPU tensors are offered and received in place, without staging.
  bool MovesCudaMemory() const;
  // Fetches posted whose transport has not let go of them yet.
  int64_t fetches_in_flight() const { return fetches_in_flight_->load(); }
  // Tagged sends posted whose transport has not let go of them yet.
  int64_t sends_in_flight() const { return sends_in_flight_->load(); }

 private:
  // Where the transport's messages go; made before the transport loads.
  struct MessageSink {
    std::mutex mu;
    plugin::MessageHandler handler;  // mu
  };

  DataPlane(std::string protocol, DataPlaneOptions options,
            std::shared_ptr<plugin::Transport> transport, std::shared_ptr<MessageSink> sink);
  // Posts the tagged send of `tensor` once an endpoint to the consumer at
  // `address` is there (made on the endpoint cache's thread).
  void SendTagged(Tensor tensor, uint64_t tag, const std::string& address,
                  ConsumerWatcher consumer, plugin::TransportDone sent);
  // Runs `post(endpoint, done)` once an endpoint to the consumer at
  // `address` is there, under a lease that aborts the endpoint when the
  // consumer is lost (shared memory never fails a transfer to a dead
  // consumer by itself). `tensor` and `hold` live until `done`.
  using PostToConsumer = absl::AnyInvocable<void(const EndpointCache::Endpoint& endpoint,
                                                 plugin::TransportDone done) &&>;
  void SendToConsumer(Tensor tensor, std::shared_ptr<const void> hold, const std::string& address,
                      ConsumerWatcher consumer, PostToConsumer post, plugin::TransportDone sent);
  // The Fetch of op put waiting under `transfer_id`, taken out; null when
  // none waits.
  plugin::TransportDone TakeAwaitedPut(uint64_t transfer_id);
  // The registration the transport reads into `destination` with.
  absl::StatusOr<plugin::Registration> LocalMemory(const Tensor& destination);

  const std::string protocol_;
  const DataPlaneOptions options_;
  const std::shared_ptr<plugin::Transport> transport_;
  const TransferOp transfer_op_;
  const std::shared_ptr<plugin::TransportAllocator> allocator_;
  plugin::RegistrationCache registrations_;
  std::string local_address_;

  HeldTransfers held_;
  // Shared with the transfers' callbacks, which may outlive the data plane.
  const std::shared_ptr<std::atomic<int64_t>> fetches_in_flight_ =
      std::make_shared<std::atomic<int64_t>>(0);
  const std::shared_ptr<std::atomic<int64_t>> sends_in_flight_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<int64_t> put_exposures_{0};
  std::atomic<int64_t> put_bytes_exposed_{0};

  std::mutex puts_mu_;
  // Fetches of op put waiting for their producer's write, by transfer id.
  absl::flat_hash_map<uint64_t, plugin::TransportDone> puts_awaited_;  // puts_mu_

  const std::shared_ptr<MessageSink> sink_;
  EndpointCache endpoints_;
};

}  // namespace rdv::control
