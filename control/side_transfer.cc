#include "control/side_transfer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "control/cuda_ipc_transfer.h"

namespace rdv::control {

std::shared_ptr<SideTransfer> SideTransfer::Start(std::shared_ptr<WorkerClient> worker,
                                                  DataPlane* data_plane,
                                                  const TensorDecoder& decoder,
                                                  absl::string_view key, Done done) {
  if (!decoder.has_cuda_ipc()) {
    return Fetch(std::move(worker), data_plane, decoder.meta().transport(), decoder.tensor(), key,
                 std::move(done));
  }
  std::shared_ptr<SideTransfer> transfer(new SideTransfer(
      std::move(worker), data_plane, key, decoder.tensor().TotalBytes(), std::move(done)));
  FetchByCudaIpc(decoder.meta().cuda_ipc(), decoder.tensor(),
                 [transfer](absl::Status status) { transfer->TransportDone(std::move(status)); });
  return transfer;
}

std::shared_ptr<SideTransfer> SideTransfer::Fetch(std::shared_ptr<WorkerClient> worker,
                                                  DataPlane* data_plane,
                                                  const TransportDescriptor& descriptor,
                                                  const Tensor& destination,
                                                  absl::string_view key, Done done,
                                                  PeerWatch::Stake stake) {
  std::shared_ptr<SideTransfer> transfer(new SideTransfer(
      std::move(worker), data_plane, key, destination.TotalBytes(), std::move(done)));
  transfer->descriptor_ = descriptor;
  const uint64_t watch_id = transfer->worker_->watch->Watch(
      [weak = std::weak_ptr<SideTransfer>(transfer)](const absl::Status& status) {
        if (std::shared_ptr<SideTransfer> told = weak.lock()) told->Told(status);
      },
      stake);
  {
    std::lock_guard lock(transfer->mu_);
    transfer->watch_id_ = watch_id;
  }
  data_plane->Fetch(transfer->descriptor_, destination,
                    [transfer](absl::Status status) { transfer->TransportDone(std::move(status)); });
  bool lost_meanwhile = false;
  {
    std::lock_guard lock(transfer->mu_);
    lost_meanwhile = transfer->producer_lost_;
  }
  // Lost before the fetch was posted: what it posted waits for nobody.
  if (lost_meanwhile) data_plane->CancelFetch(transfer->descriptor_, true);
  return transfer;
}

std::string SideTransfer::Describe() const {
  return absl::StrCat("the transfer of '", Excerpt(key_), "' (", bytes_, " bytes) from worker ",
                      worker_->worker_name, " at ", worker_->address);
}

SideTransfer::SideTransfer(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                           absl::string_view key, size_t bytes, Done done)
    : counted_(worker->calls),
      worker_(std::move(worker)),
      data_plane_(data_plane),
      key_(key),
      bytes_(bytes),
      done_(std::move(done)) {}

bool SideTransfer::Claim() {
  std::lock_guard lock(mu_);
  if (ended_) return false;
  ended_ = true;
  return true;
}

void SideTransfer::Unwatch() {
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = std::exchange(watch_id_, 0);
  }
  if (id != 0) worker_->watch->Unwatch(id);
}

void SideTransfer::TransportDone(absl::Status status) {
  Unwatch();
  if (!Claim()) return;
  if (!status.ok()) {
    status = absl::Status(status.code(), absl::StrCat(Describe(), " failed: ", status.message()));
  }
  std::move(done_)(std::move(status));
}

void SideTransfer::Told(const absl::Status& status) {
  const bool lost = !absl::IsDeadlineExceeded(status);
  absl::Duration limit;
  {
    std::lock_guard lock(mu_);
    if (ended_) return;
    limit = arrival_limit_;
    ended_ = true;
    producer_lost_ = lost;
    watch_id_ = 0;
  }
  data_plane_->CancelFetch(descriptor_, lost);
  if (lost) {
    std::move(done_)(status);
    return;
  }
  std::move(done_)(absl::DataLossError(
      absl::StrCat(Describe(), " failed: the producer reported its send done, but the bytes ",
                   "did not arrive within ", absl::FormatDuration(limit))));
}

void SideTransfer::ExpectArrivalWithin(absl::Duration limit) {
  if (descriptor_.op() != TRANSFER_OP_TAG) return;
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    arrival_limit_ = limit;
    id = watch_id_;
  }
  if (id != 0) worker_->watch->SetDeadline(id, absl::Now() + limit);
}

void SideTransfer::Cancel() {
  if (descriptor_.producer_transport_address().empty()) return;  // a CUDA IPC copy
  data_plane_->CancelFetch(descriptor_, false);
}

void SideTransfer::End(absl::Status status) {
  Cancel();
  Unwatch();
  if (Claim()) std::move(done_)(std::move(status));
}

}  // namespace rdv::control
