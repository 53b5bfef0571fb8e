// The fast path's consumer side: one Recv of a known key (control/fast_path.h).
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "control/fast_path.h"
#include "control/landing_allocator.h"
#include "control/read_ahead.h"
#include "control/side_transfer.h"
#include "core/logging.h"

namespace rdv::control {

FastRecvCall::FastRecvCall(DataPlane* data_plane, std::shared_ptr<FastWaiting> waiting,
                           std::shared_ptr<WorkerClient> worker, int64_t step_id,
                           std::string key, KnownFastKey known,
                           std::shared_ptr<const RecvTensorRequest> fallback, int64_t request_id,
                           std::shared_ptr<Buffer> landing, FastPath::Detach detach,
                           FastPath::Done done, bool ahead)
    : data_plane_(data_plane),
      waiting_(std::move(waiting)),
      worker_(std::move(worker)),
      step_id_(step_id),
      key_(std::move(key)),
      known_(std::move(known)),
      fallback_(std::move(fallback)),
      landing_(std::move(landing)),
      detach_(std::move(detach)),
      done_(std::move(done)),
      request_id_(static_cast<uint64_t>(request_id)),
      ahead_(ahead),
      worker_name_(worker_->worker_name) {}

void FastRecvCall::Start() {
  std::optional<std::string> request = Prepare();
  if (!request.has_value()) return;
  waiting_->request_messages.fetch_add(1);
  SendToProducer(*std::move(request), "request");
}

std::optional<std::string> FastRecvCall::Prepare() {
  DataPlane* plane = data_plane_;
  std::shared_ptr<Allocator> allocator = plane->ReceiveAllocator(MemoryLocation::Host());
  if (landing_ != nullptr) {
    allocator = std::make_shared<LandingAllocator>(landing_, std::move(allocator));
  }
  absl::StatusOr<Tensor> destination = Tensor::Allocate(allocator, known_.dtype, known_.shape);
  if (!destination.ok()) {
    Complete(destination.status(), Tensor(), false);
    return std::nullopt;
  }
  std::string put_key;
  std::unique_ptr<plugin::TransportMemory> exposed;
  if (known_.put && destination->TotalBytes() > 0) {
    absl::StatusOr<std::unique_ptr<plugin::TransportMemory>> exposure =
        plane->ExposeForPut(*destination);
    if (!exposure.ok()) {
      Complete(absl::Status(exposure.status().code(),
                            absl::StrCat("the fast path cannot register the destination "
                                         "for the producer's write: ",
                                         exposure.status().message())),
               Tensor(), false);
      return std::nullopt;
    }
    put_key = (*exposure)->remote_key();
    if (put_key.size() > kMaxPutKeyBytes) {
      RDV_LOG(Warning) << "fast path: the transport's remote key has " << put_key.size()
                       << " bytes, more than a request carries (" << kMaxPutKeyBytes
                       << "): Recv of '" << key_ << "' takes RecvTensor";
      FetchBySlowPath(AsksForHeldValue());
      return std::nullopt;
    }
    exposed = *std::move(exposure);
  }
  destination_ = *std::move(destination);
  bool held = false;
  {
    std::lock_guard lock(mu_);
    exposed_ = std::move(exposed);
    if (known_.get) read_into_.emplace(destination_);
    held = held_;
  }
  TransportDescriptor descriptor;
  // A write (B) and a read (D) alike end when this side hears they are
  // done: the Fetch of op put waits for Landed.
  descriptor.set_op(known_.put || known_.get ? TRANSFER_OP_PUT : TRANSFER_OP_TAG);
  descriptor.set_transfer_id(request_id_);
  descriptor.set_length(destination_.TotalBytes());
  descriptor.set_producer_transport_address(*known_.producer_transport_address);
  std::shared_ptr<FastRecvCall> self = shared_from_this();
  bool stopped = false;
  {
    std::lock_guard lock(waiting_->mu);
    stopped = waiting_->stopped;
    if (!stopped) waiting_->calls[request_id_] = self;
  }
  if (stopped) {
    Complete(absl::CancelledError("the worker is shutting down"), Tensor(), false);
    return std::nullopt;
  }
  std::shared_ptr<SideTransfer> transfer = SideTransfer::Fetch(
      worker_, plane, descriptor, destination_, key_,
      [self](absl::Status status) { self->TransferDone(std::move(status)); },
      ahead_ ? PeerWatch::Stake::kUnawaited : PeerWatch::Stake::kAwaited);
  bool ended = false;
  {
    std::lock_guard lock(mu_);
    transfer_ = transfer;
    ended = !ended_by_.ok();
    requested_ = !ended;
  }
  // Ended before the request went (an abort, or a cancellation that had
  // nothing to withdraw): nothing will be sent to the receive.
  if (ended) {
    transfer->Cancel();
    return std::nullopt;
  }
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' requested"
                 << (held ? " again, reshaped" : "");
  return EncodeFastRequest(RequestFor(std::move(put_key), held));
}

bool FastRecvCall::AsksForHeldValue() {
  std::lock_guard lock(mu_);
  return held_;
}

FastRequest FastRecvCall::RequestFor(std::string put_key, bool held) const {
  FastRequest request;
  request.key_id = known_.id;
  request.step_id = step_id_;
  request.request_id = request_id_;
  request.bytes = destination_.TotalBytes();
  request.dtype = static_cast<int32_t>(known_.dtype);
  const absl::Span<const int64_t> dims = known_.shape.dims();
  request.num_dims = static_cast<uint32_t>(dims.size());
  std::copy(dims.begin(), dims.end(), request.dims);
  request.put = known_.put;
  request.read = known_.get;
  request.held = held;
  request.put_address = reinterpret_cast<uint64_t>(destination_.data());
  request.put_key = std::move(put_key);
  return request;
}

void FastRecvCall::SendToProducer(std::string message, absl::string_view what) {
  data_plane_->SendMessage(*known_.producer_transport_address, std::move(message),
                           [self = shared_from_this(), what = std::string(what)](
                               absl::Status sent) { self->NotSent(sent, what); });
}

void FastRecvCall::NotSent(const absl::Status& sent, absl::string_view what) {
  // The transport to the producer failed: it is lost or unreachable,
  // whatever the transport's code.
  if (sent.ok()) return;
  Abort(absl::UnavailableError(absl::StrCat("the fast-path ", what, " did not reach worker ",
                                            worker_name_, ": ", sent.message())));
}

void FastRecvCall::Cancel(const absl::Status& status) {
  bool requested = false;
  bool held = false;
  {
    std::lock_guard lock(mu_);
    if (!cancelled_.ok()) return;
    cancelled_ = status;
    requested = requested_;
    held = held_;
    if (slow_call_ != nullptr) return slow_call_->Cancel(status);
  }
  if (!requested) return Abort(status);
  // The producer took the value a held request asks for already, and
  // answers it at once: there is nothing to withdraw, and the Recv ends
  // with that answer.
  if (held) return;
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' withdrawing";
  SendToProducer(EncodeFastWithdrawal({known_.id, step_id_, request_id_}), "withdrawal");
}

void FastRecvCall::Abort(const absl::Status& status) {
  bool answers_taken = false;
  {
    std::lock_guard lock(waiting_->mu);
    answers_taken = !waiting_->stopped;
  }
  bool withdraw = false;
  {
    std::lock_guard lock(mu_);
    // A read-ahead's value may already be on its way: it is withdrawn
    // instead, and the receive stays posted until the producer answers
    // (at once, or its loss ends the transfer; FastPath::Stop ends it when
    // answers are no longer taken), so that nothing arrives after it to
    // lie unmatched in the transport.
    withdraw = answers_taken && ahead_ && requested_ && cancelled_.ok() && ended_by_.ok() &&
               slow_call_ == nullptr;
    if (withdraw) cancelled_ = status;
  }
  if (withdraw) {
    return SendToProducer(EncodeFastWithdrawal({known_.id, step_id_, request_id_}), "withdrawal");
  }
  End(status);
}

void FastRecvCall::End(const absl::Status& status) {
  std::shared_ptr<SideTransfer> transfer;
  {
    std::lock_guard lock(mu_);
    if (ended_by_.ok()) ended_by_ = status;
    transfer = transfer_;
    // Under the lock: its detach (which takes it) ends this pointer.
    if (slow_call_ != nullptr) slow_call_->Abort(status);
  }
  if (transfer != nullptr) transfer->Cancel();
}

absl::StatusOr<FastRecvCall::Metadata> FastRecvCall::MetadataOf(const FastNotice& notice) {
  absl::StatusOr<DType> dtype = DTypeFromEnumValue(notice.dtype);
  if (!dtype.ok() || !DTypeIsMemcpyable(*dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a reshaped notice names dtype ", notice.dtype,
                     ", which the fast path does not carry"));
  }
  absl::StatusOr<TensorShape> shape =
      TensorShape::Create(absl::MakeConstSpan(notice.dims, notice.num_dims));
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a reshaped notice names an impossible shape: ", shape.status().message()));
  }
  return Metadata{*dtype, *std::move(shape)};
}

FastRecvCall::AfterNotice FastRecvCall::AfterNoticeOf(FastNoticeKind kind,
                                                      bool can_ask_again) {
  switch (kind) {
    case FastNoticeKind::kDead:
      return AfterNotice::kDead;
    case FastNoticeKind::kChanged:
      return AfterNotice::kFetchHeld;
    case FastNoticeKind::kSlowPath:
      return AfterNotice::kFetchNext;
    case FastNoticeKind::kReshaped:
      // Asked for again once, with the value's own shape; a value this Recv
      // cannot ask for so is fetched by RecvTensor, as a changed one.
      return can_ask_again ? AfterNotice::kAskAgain : AfterNotice::kFetchHeld;
    default:
      return AfterNotice::kEnd;
  }
}

absl::Status FastRecvCall::Told(const FastNotice& notice) {
  if (notice.kind == FastNoticeKind::kReadable) return Read(notice);
  const bool reshaped = notice.kind == FastNoticeKind::kReshaped;
  absl::StatusOr<Metadata> metadata =
      reshaped ? MetadataOf(notice) : absl::StatusOr<Metadata>(Metadata{});
  std::shared_ptr<SideTransfer> transfer;
  {
    std::lock_guard lock(mu_);
    after_notice_ = AfterNoticeOf(notice.kind, metadata.ok() && !held_);
    if (after_notice_ == AfterNotice::kAskAgain) reshaped_ = *metadata;
    if (notice.kind == FastNoticeKind::kFailed && ended_by_.ok()) {
      ended_by_ = absl::Status(static_cast<absl::StatusCode>(notice.code), notice.message);
    }
    if (notice.kind == FastNoticeKind::kWithdrawn && ended_by_.ok()) {
      ended_by_ = cancelled_.ok() ? absl::CancelledError("the producer withdrew the fast-path Recv")
                                  : cancelled_;
    }
    transfer = transfer_;
  }
  // No send will match the receive: it ends now, CANCELLED.
  if (transfer != nullptr) transfer->Cancel();
  return metadata.status();
}

absl::Status FastRecvCall::Read(const FastNotice& notice) {
  std::optional<Tensor> destination;
  {
    std::lock_guard lock(mu_);
    destination.swap(read_into_);
  }
  DataPlane* const plane = data_plane_;
  const uint64_t request_id = request_id_;
  if (!destination.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a readable notice for Recv ", request_id, ", which reads nothing (now)"));
  }
  TransportDescriptor descriptor;
  descriptor.set_op(TRANSFER_OP_GET);
  descriptor.set_transfer_id(notice.transfer_id);
  descriptor.set_length(destination->TotalBytes());
  descriptor.set_address(notice.address);
  descriptor.set_remote_key(notice.remote_key);
  descriptor.set_producer_transport_address(*known_.producer_transport_address);
  const FastRelease release{known_.id, step_id_, notice.transfer_id, destination->TotalBytes()};
  std::shared_ptr<const std::string> producer = known_.producer_transport_address;
  std::weak_ptr<FastRecvCall> weak = weak_from_this();
  // `destination` lives in the Fetch until the read ends, whatever ended
  // the Recv meanwhile.
  plane->Fetch(descriptor, *std::move(destination),
               [plane, request_id, release, producer, weak](absl::Status read) {
                 plane->SendMessage(*producer, EncodeFastRelease(release), [](absl::Status sent) {
                   // The producer frees it at the step's cleanup instead.
                   if (!sent.ok()) RDV_LOG(Debug) << "fast path: a release was not sent: " << sent;
                 });
                 if (read.ok()) {
                   plane->Landed(request_id);
                 } else if (std::shared_ptr<FastRecvCall> self = weak.lock()) {
                   self->Abort(absl::Status(read.code(), absl::StrCat("the fast-path read: ",
                                                                      read.message())));
                 }
               });
  return absl::OkStatus();
}

void FastRecvCall::Unregister() {
  std::lock_guard lock(waiting_->mu);
  waiting_->calls.erase(request_id_);
}

void FastRecvCall::TransferDone(absl::Status status) {
  Unregister();
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' ended: " << status;
  AfterNotice after = AfterNotice::kEnd;
  Metadata reshaped;
  absl::Status ended_by;
  {
    std::lock_guard lock(mu_);
    after = std::exchange(after_notice_, AfterNotice::kEnd);
    if (after == AfterNotice::kAskAgain) reshaped = std::move(reshaped_);
    ended_by = ended_by_;
    transfer_.reset();
    // The producer's access to the destination ends before the Recv does.
    exposed_.reset();
  }
  // Taken whole: the Recv's result, or let go.
  Tensor destination(std::move(destination_));
  if (!ended_by.ok()) return Complete(ended_by, Tensor(), false);
  if (status.ok()) return Complete(absl::OkStatus(), std::move(destination), false);
  switch (after) {
    case AfterNotice::kDead:
      return Complete(absl::OkStatus(), Tensor(), true);
    case AfterNotice::kAskAgain:
      destination = Tensor();
      return AskAgain(std::move(reshaped));
    case AfterNotice::kFetchHeld:
      return FetchBySlowPath(/*held=*/true);
    case AfterNotice::kFetchNext:
      return FetchBySlowPath(/*held=*/false);
    case AfterNotice::kEnd:
      return Complete(std::move(status), Tensor(), false);
  }
}

void FastRecvCall::AskAgain(Metadata metadata) {
  known_.dtype = metadata.dtype;
  known_.shape = std::move(metadata.shape);
  // The key's next Recvs ask with the shape its values have now.
  worker_->fast_keys.Learn(key_, known_);
  {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  // Counted once held: from then on a cancellation withdraws nothing.
  waiting_->asked_again.fetch_add(1);
  Start();
}

void FastRecvCall::FetchBySlowPath(bool held) {
  if (ahead_ && !held) return Complete(NotServedAhead(), Tensor(), false);
  waiting_->fetched_by_recv_tensor.fetch_add(1);
  // A RecvTensor call of its own, bounded as any. This call stays hooked to
  // the rendezvous and passes an abort or a cancellation on to it.
  RecvTensorRequest request = *fallback_;
  request.set_rendezvous_key(key_);
  request.set_request_id(static_cast<int64_t>(request_id_));
  request.set_fetch_held(held);
  std::shared_ptr<FastRecvCall> self = shared_from_this();
  auto* call = new RecvTensorCall(
      std::move(worker_), data_plane_, std::move(request), MemoryLocation::Host(),
      [self](AbortableCall*) {
        std::lock_guard lock(self->mu_);
        self->slow_call_ = nullptr;
      },
      [self](absl::Status status, Tensor tensor, bool is_dead) {
        self->Complete(std::move(status), std::move(tensor), is_dead);
      });
  {
    std::lock_guard lock(mu_);
    slow_call_ = call;
  }
  call->Start();
  // A cancellation that came while the fast request was answered.
  std::lock_guard lock(mu_);
  if (!cancelled_.ok() && slow_call_ != nullptr) slow_call_->Cancel(cancelled_);
}

void FastRecvCall::Complete(absl::Status status, Tensor tensor, bool is_dead) {
  worker_.reset();
  std::move(detach_)(this);
  std::move(done_)(std::move(status), std::move(tensor), is_dead);
}

}  // namespace rdv::control
