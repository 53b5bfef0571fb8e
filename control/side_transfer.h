// The side transfer of a RecvTensor answer, bounded by its producer's life
// and by the call's abort (control/recv_exchange.h starts it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "control/data_plane.h"
#include "control/peer_watch.h"
#include "control/tensor_codec.h"
#include "control/worker_cache.h"

namespace rdv::control {

// The copy a RecvTensor answer described (a data-plane transfer or CUDA
// IPC) into the decoder's tensor, bounded by its producer's life: `done`
// runs once, at the first of the copy's end, End(), and the producer's loss
// (PeerWatch), which aborts the data plane's endpoint to it. A copy ended
// early keeps its destination alive until the transport lets go of it. A
// failure names the key, the size and the producer.
class SideTransfer {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // `done` runs on the transport's, CUDA's or the watch's thread, or here
  // when the copy cannot start. `data_plane` must outlive the transfer;
  // `key` is the rendezvous key the answer is for.
  static std::shared_ptr<SideTransfer> Start(std::shared_ptr<WorkerClient> worker,
                                             DataPlane* data_plane, const TensorDecoder& decoder,
                                             absl::string_view key, Done done);
  // The data-plane transfer `descriptor` describes into `destination`
  // (from the data plane's ReceiveAllocator, of the descriptor's length):
  // the fast path's, which has no answer to decode. `stake`: whether a Recv
  // waits for it (PeerWatch::Stake).
  static std::shared_ptr<SideTransfer> Fetch(
      std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
      const TransportDescriptor& descriptor, const Tensor& destination, absl::string_view key,
      Done done, PeerWatch::Stake stake = PeerWatch::Stake::kAwaited);

  // Asks the transport to end it early (a tagged receive no send matched
  // yet); `done` then runs on the transport's thread. Safe under the
  // caller's locks.
  void Cancel();
  // Cancel(), and ends it now with `status`: `done` runs here.
  void End(absl::Status status);
  // The producer says its part is over. A tagged send completes only once
  // its bytes left, so they must arrive within `limit` (else DATA_LOSS); a
  // get reads for as long as it takes.
  void ExpectArrivalWithin(absl::Duration limit);

 private:
  SideTransfer(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
               absl::string_view key, size_t bytes, Done done);
  // "the transfer of 'KEY' (N bytes) from worker W at A", for its errors:
  // made only when one comes, as every fast Recv is a transfer.
  std::string Describe() const;
  void TransportDone(absl::Status status);
  // From the watch: the producer is lost, or the arrival limit passed.
  void Told(const absl::Status& status);
  // True for the one caller that ends it.
  bool Claim();
  void Unwatch();

  CountedCall counted_;  // first: the count ends after worker_ is gone
  const std::shared_ptr<WorkerClient> worker_;  // for its watch
  DataPlane* const data_plane_;
  const std::string key_;
  const size_t bytes_;
  TransportDescriptor descriptor_;  // set before the fetch starts; empty for CUDA IPC
  Done done_;
  std::mutex mu_;
  bool ended_ = false;          // mu_
  bool producer_lost_ = false;  // mu_
  uint64_t watch_id_ = 0;       // mu_: 0 when not watched
  absl::Duration arrival_limit_;  // mu_
};

}  // namespace rdv::control
