#include "control/fast_path.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "control/landing_allocator.h"
#include "control/side_transfer.h"
#include "core/logging.h"

namespace rdv::control {
namespace {

bool ShapeMatches(const FastRequest& request, const Tensor& value) {
  const absl::Span<const int64_t> dims = value.shape().dims();
  if (static_cast<int>(value.dtype()) != request.dtype || dims.size() != request.num_dims) {
    return false;
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != request.dims[i]) return false;
  }
  return value.TotalBytes() == request.bytes;
}

}  // namespace

FastPath::FastPath(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr, TensorService& tensors)
    : env_(env), rendezvous_mgr_(rendezvous_mgr), tensors_(tensors) {
  env_.data_plane->SetMessageSink([this](absl::string_view message) { OnMessage(message); });
}

FastPath::~FastPath() { Stop(); }

void FastPath::Stop() { env_.data_plane->SetMessageSink(nullptr); }

std::shared_ptr<FastRecvCall> FastPath::NewRecv(std::shared_ptr<WorkerClient> worker,
                                                int64_t step_id, std::string key,
                                                KnownFastKey known, RecvTensorRequest fallback,
                                                std::shared_ptr<Buffer> landing, Detach detach,
                                                Done done) {
  recvs_started_.fetch_add(1);
  return std::make_shared<FastRecvCall>(env_.data_plane, waiting_, std::move(worker), step_id,
                                        std::move(key), std::move(known), std::move(fallback),
                                        std::move(landing), std::move(detach), std::move(done));
}

void FastPath::OnMessage(absl::string_view message) {
  absl::StatusOr<FastKind> kind = PeekFastKind(message);
  if (!kind.ok()) return Refuse(kind.status());
  if (*kind == FastKind::kRequest) {
    absl::StatusOr<FastRequest> request = DecodeFastRequest(message);
    return request.ok() ? OnRequest(*request) : Refuse(request.status());
  }
  if (*kind == FastKind::kRelease) {
    absl::StatusOr<FastRelease> release = DecodeFastRelease(message);
    return release.ok() ? OnRelease(*release) : Refuse(release.status());
  }
  if (*kind == FastKind::kWithdraw) {
    absl::StatusOr<FastWithdrawal> withdrawal = DecodeFastWithdrawal(message);
    return withdrawal.ok() ? OnWithdrawal(*withdrawal) : Refuse(withdrawal.status());
  }
  absl::StatusOr<FastNotice> notice = DecodeFastNotice(message);
  return notice.ok() ? OnNotice(*notice) : Refuse(notice.status());
}

void FastPath::AppendStats(GetStatsResponse* response) const {
  for (const auto& [name, value] :
       {std::pair{"rdv_fast_path_messages_refused_total", refused()},
        std::pair{"rdv_fast_path_recvs_started_total", recvs_started()},
        std::pair{"rdv_fast_path_requests_served_total", requests_served()},
        std::pair{"rdv_fast_path_requests_overflowed_total", requests_overflowed()}}) {
    StatsCounter* counter = response->add_counters();
    counter->set_name(name);
    counter->set_value(static_cast<double>(value));
  }
}

void FastPath::Refuse(const absl::Status& why) {
  refused_.fetch_add(1);
  RDV_LOG(Warning) << "fast path: dropped a message: " << why;
}

void FastPath::OnRequest(const FastRequest& request) {
  std::optional<FastKeyIds::Entry> entry = tensors_.fast_key_ids().Find(request.key_id);
  if (!entry.has_value()) return Refuse(absl::NotFoundError("a request naming an unknown key id"));
  absl::StatusOr<ParsedKey> key = ParsedKey::Parse(entry->key);
  if (!key.ok()) return Refuse(key.status());
  std::shared_ptr<ServedRequest> served = StartServing(request, entry->consumer_address);
  if (served == nullptr) return;
  requests_served_.fetch_add(1);
  RDV_LOG(Debug) << "fast path: request " << request.request_id << " for '" << entry->key
                 << "' step " << request.step_id << " (" << request.bytes << " bytes)";
  RendezvousArgs args;
  args.as_sent = true;  // a GPU value is the slow path's (a changed notice)
  args.cancellation_manager = &served->cancel;
  rendezvous_mgr_.Find(request.step_id)
      ->RecvAsync(*key, args,
                  [this, request, served, entry = *std::move(entry), parsed = *key](
                      const absl::Status& status, const RendezvousArgs&, const RendezvousArgs&,
                      const Tensor& value, bool is_dead) {
                    StopServing({request.key_id, request.step_id, request.request_id});
                    Answer(request, entry, parsed, status, value, is_dead,
                           served->withdrawn.load());
                  });
}

std::shared_ptr<FastPath::ServedRequest> FastPath::StartServing(
    const FastRequest& request, const std::string& consumer_address) {
  const ServedId id{request.key_id, request.step_id, request.request_id};
  bool withdrawn_early = false;
  bool full = false;
  std::shared_ptr<ServedRequest> served;
  {
    std::lock_guard lock(serving_mu_);
    withdrawn_early = early_withdrawals_.erase(id) > 0;
    full = serving_.size() >= kMaxWaitingRequests;
    if (!withdrawn_early && !full) {
      auto [it, inserted] = serving_.try_emplace(id);
      if (inserted) served = it->second = std::make_shared<ServedRequest>();
    }
  }
  if (withdrawn_early) {
    RDV_LOG(Debug) << "fast path: request " << request.request_id << " came after its withdrawal";
    Notify(env_.data_plane, consumer_address,
           FastNotice{request.request_id, FastNoticeKind::kWithdrawn, 0, ""});
  } else if (full) {
    requests_overflowed_.fetch_add(1);
    RDV_LOG(Debug) << "fast path: request " << request.request_id << " sent to RecvTensor ("
                   << kMaxWaitingRequests << " wait already)";
    Notify(env_.data_plane, consumer_address,
           FastNotice{request.request_id, FastNoticeKind::kSlowPath, 0, ""});
  } else if (served == nullptr) {
    Refuse(absl::AlreadyExistsError("a request repeating one that waits"));
  }
  return served;
}

void FastPath::StopServing(const ServedId& id) {
  std::lock_guard lock(serving_mu_);
  serving_.erase(id);
}

void FastPath::OnWithdrawal(const FastWithdrawal& withdrawal) {
  if (!tensors_.fast_key_ids().Find(withdrawal.key_id).has_value()) {
    return Refuse(absl::NotFoundError("a withdrawal naming an unknown key id"));
  }
  const ServedId id{withdrawal.key_id, withdrawal.step_id, withdrawal.request_id};
  std::shared_ptr<ServedRequest> served;
  {
    std::lock_guard lock(serving_mu_);
    if (auto it = serving_.find(id); it != serving_.end()) {
      served = it->second;
    } else {
      // Not here yet (the request is overtaken), or already answered (its
      // value or notice is on the way, and ends the Recv).
      RememberEarlyWithdrawal(id);
    }
  }
  RDV_LOG(Debug) << "fast path: request " << withdrawal.request_id << " withdrawn"
                 << (served == nullptr ? " (not waiting)" : "");
  if (served == nullptr) return;
  served->withdrawn.store(true);
  // Either the wait ends now (CANCELLED: a withdrawn notice), or a value
  // took it first and goes to the consumer as usual.
  served->cancel.StartCancel();
}

void FastPath::OnRelease(const FastRelease& release) {
  if (!tensors_.fast_key_ids().Find(release.key_id).has_value()) {
    return Refuse(absl::NotFoundError("a release naming an unknown key id"));
  }
  ReleasedTransfer transfer;
  transfer.set_step_id(release.step_id);
  transfer.set_transfer_id(release.transfer_id);
  transfer.set_length(release.bytes);
  if (absl::Status released = env_.data_plane->Release(transfer); !released.ok()) {
    Refuse(released);
  }
}

void FastPath::RememberEarlyWithdrawal(const ServedId& id) {
  if (!early_withdrawals_.insert(id).second) return;
  early_withdrawal_order_.push_back(id);
  while (early_withdrawal_order_.size() > kMaxEarlyWithdrawals) {
    early_withdrawals_.erase(early_withdrawal_order_.front());
    early_withdrawal_order_.pop_front();
  }
}

void FastPath::Answer(const FastRequest& request, const FastKeyIds::Entry& entry,
                      const ParsedKey& key, const absl::Status& status, const Tensor& value,
                      bool is_dead, bool withdrawn) {
  DataPlane* const plane = env_.data_plane;
  const uint64_t id = request.request_id;
  if (withdrawn && absl::IsCancelled(status)) {
    return Notify(plane, entry.consumer_address,
                  FastNotice{id, FastNoticeKind::kWithdrawn, 0, ""});
  }
  if (!status.ok()) return Notify(plane, entry.consumer_address, Failed(id, "Recv", status));
  if (is_dead) {
    return Notify(plane, entry.consumer_address, FastNotice{id, FastNoticeKind::kDead, 0, ""});
  }
  if (!value.location().is_host() || !ShapeMatches(request, value)) {
    tensors_.HoldForFetch(request.step_id, static_cast<int64_t>(id), key, value, false);
    return Notify(plane, entry.consumer_address,
                  FastNotice{id, FastNoticeKind::kChanged, 0, ""});
  }
  const bool lend = !request.put && plane->transfer_op() == TRANSFER_OP_GET;
  RDV_LOG(Debug) << "fast path: request " << id << " answered by a "
                 << (request.put ? "write" : lend ? "readable notice" : "tagged send");
  env_.stats->Sent(SentPath::kFastPath, value.TotalBytes());
  const ConsumerWatcher consumer(*env_.worker_cache, env_.worker_name, key);
  if (request.put) return Write(request, entry.consumer_address, value, consumer);
  if (lend) return Lend(request, entry, key, value, consumer);
  absl::StatusOr<TransportDescriptor> offered = plane->Offer(
      request.step_id, static_cast<int64_t>(id), value, entry.consumer_address, consumer,
      NotifyIfFailed(plane, entry.consumer_address, id, "tagged send"));
  if (!offered.ok()) Notify(plane, entry.consumer_address, Failed(id, "offer", offered.status()));
}

void FastPath::Write(const FastRequest& request, const std::string& consumer_address,
                     const Tensor& value, const ConsumerWatcher& consumer) {
  DataPlane* const plane = env_.data_plane;
  auto landed = [plane, id = request.request_id, address = consumer_address](absl::Status written) {
    Notify(plane, address,
           written.ok() ? FastNotice{id, FastNoticeKind::kLanded, 0, ""}
                        : Failed(id, "write", written));
  };
  if (value.TotalBytes() == 0) return landed(absl::OkStatus());
  if (!plane->messages_follow_puts()) {
    return plane->Put(value, consumer_address, request.put_address, request.put_key, consumer,
                      std::move(landed));
  }
  // The notice goes right behind the write and arrives after its bytes:
  // no wait for the write's completion, which costs a round trip.
  plane->PutThenMessage(
      value, consumer_address, request.put_address, request.put_key, consumer,
      EncodeFastNotice(FastNotice{request.request_id, FastNoticeKind::kLanded, 0, ""}),
      NotifyIfFailed(plane, consumer_address, request.request_id, "write"));
}

void FastPath::Lend(const FastRequest& request, const FastKeyIds::Entry& entry,
                    const ParsedKey& key, const Tensor& value, const ConsumerWatcher& consumer) {
  DataPlane* const plane = env_.data_plane;
  const uint64_t id = request.request_id;
  if (value.TotalBytes() == 0) {
    return Notify(plane, entry.consumer_address, FastNotice{id, FastNoticeKind::kLanded, 0, ""});
  }
  absl::StatusOr<TransportDescriptor> offered =
      plane->Offer(request.step_id, static_cast<int64_t>(id), value, entry.consumer_address,
                   consumer, [](absl::Status) {});
  if (!offered.ok()) {
    return Notify(plane, entry.consumer_address, Failed(id, "offer", offered.status()));
  }
  if (offered->remote_key().size() > kMaxPutKeyBytes) {
    // Too long for a notice: the consumer fetches the value by RecvTensor.
    ReleasedTransfer held;
    held.set_step_id(request.step_id);
    held.set_transfer_id(offered->transfer_id());
    held.set_length(offered->length());
    plane->Release(held).IgnoreError();
    tensors_.HoldForFetch(request.step_id, static_cast<int64_t>(id), key, value, false);
    return Notify(plane, entry.consumer_address, FastNotice{id, FastNoticeKind::kChanged, 0, ""});
  }
  FastNotice readable{id, FastNoticeKind::kReadable, 0, ""};
  readable.transfer_id = offered->transfer_id();
  readable.address = offered->address();
  readable.remote_key = offered->remote_key();
  Notify(plane, entry.consumer_address, std::move(readable));
}

plugin::TransportDone FastPath::NotifyIfFailed(DataPlane* data_plane,
                                               const std::string& consumer_address,
                                               uint64_t request_id, const char* what) {
  return [data_plane, consumer_address, request_id, what](absl::Status status) {
    if (!status.ok()) Notify(data_plane, consumer_address, Failed(request_id, what, status));
  };
}

FastNotice FastPath::Failed(uint64_t request_id, absl::string_view what,
                            const absl::Status& status) {
  return FastNotice{request_id, FastNoticeKind::kFailed, static_cast<int32_t>(status.code()),
                    absl::StrCat("the producer's ", what, ": ", status.message())};
}

void FastPath::Notify(DataPlane* data_plane, const std::string& consumer_address,
                      FastNotice notice) {
  data_plane->SendMessage(consumer_address, EncodeFastNotice(notice), [](absl::Status sent) {
    // The consumer is gone or unreachable: its Recv ends by its watch.
    if (!sent.ok()) RDV_LOG(Debug) << "fast path: a notice was not sent: " << sent;
  });
}

void FastPath::OnNotice(const FastNotice& notice) {
  // Ends the write's Fetch, whose end completes the Recv.
  if (notice.kind == FastNoticeKind::kLanded) {
    if (!env_.data_plane->Landed(notice.request_id)) {
      Refuse(absl::NotFoundError("a landed notice for no write awaited"));
    }
    return;
  }
  std::shared_ptr<FastRecvCall> call;
  {
    std::lock_guard lock(waiting_->mu);
    if (auto it = waiting_->calls.find(notice.request_id); it != waiting_->calls.end()) {
      call = it->second.lock();
    }
  }
  if (call == nullptr) return Refuse(absl::NotFoundError("a notice for no waiting Recv"));
  call->Told(notice);
}

FastRecvCall::FastRecvCall(DataPlane* data_plane, std::shared_ptr<FastWaiting> waiting,
                           std::shared_ptr<WorkerClient> worker, int64_t step_id,
                           std::string key, KnownFastKey known, RecvTensorRequest fallback,
                           std::shared_ptr<Buffer> landing, FastPath::Detach detach,
                           FastPath::Done done)
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
      request_id_(static_cast<uint64_t>(fallback_.request_id())),
      worker_name_(worker_->worker_name) {}

void FastRecvCall::Start() {
  DataPlane* plane = data_plane_;
  std::shared_ptr<Allocator> allocator = plane->ReceiveAllocator(MemoryLocation::Host());
  if (landing_ != nullptr) {
    allocator = std::make_shared<LandingAllocator>(std::move(landing_), std::move(allocator));
  }
  absl::StatusOr<Tensor> destination = Tensor::Allocate(allocator, known_.dtype, known_.shape);
  if (!destination.ok()) return Complete(destination.status(), Tensor(), false);
  std::string put_key;
  std::unique_ptr<plugin::TransportMemory> exposed;
  if (known_.put && destination->TotalBytes() > 0) {
    absl::StatusOr<std::unique_ptr<plugin::TransportMemory>> exposure =
        plane->ExposeForPut(*destination);
    if (!exposure.ok()) {
      return Complete(absl::Status(exposure.status().code(),
                                   absl::StrCat("the fast path cannot register the destination "
                                                "for the producer's write: ",
                                                exposure.status().message())),
                      Tensor(), false);
    }
    put_key = (*exposure)->remote_key();
    if (put_key.size() > kMaxPutKeyBytes) {
      RDV_LOG(Warning) << "fast path: the transport's remote key has " << put_key.size()
                       << " bytes, more than a request carries (" << kMaxPutKeyBytes
                       << "): Recv of '" << key_ << "' takes RecvTensor";
      return FetchBySlowPath(false);
    }
    exposed = *std::move(exposure);
  }
  destination_ = *std::move(destination);
  {
    std::lock_guard lock(mu_);
    exposed_ = std::move(exposed);
    if (known_.get) read_into_.emplace(destination_);
  }
  TransportDescriptor descriptor;
  // A write (B) and a read (D) alike end when this side hears they are
  // done: the Fetch of op put waits for Landed.
  descriptor.set_op(known_.put || known_.get ? TRANSFER_OP_PUT : TRANSFER_OP_TAG);
  descriptor.set_transfer_id(request_id_);
  descriptor.set_length(destination_.TotalBytes());
  descriptor.set_producer_transport_address(known_.producer_transport_address);
  std::shared_ptr<FastRecvCall> self = shared_from_this();
  {
    std::lock_guard lock(waiting_->mu);
    waiting_->calls[request_id_] = self;
  }
  std::shared_ptr<SideTransfer> transfer = SideTransfer::Fetch(
      worker_, plane, descriptor, destination_, key_,
      [self](absl::Status status) { self->TransferDone(std::move(status)); });
  bool ended = false;
  {
    std::lock_guard lock(mu_);
    transfer_ = transfer;
    ended = !ended_by_.ok();
    requested_ = !ended;
  }
  // Ended before the request went (an abort, or a cancellation that had
  // nothing to withdraw): nothing will be sent to the receive.
  if (ended) return transfer->Cancel();
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' requested";
  SendToProducer(EncodeFastRequest(RequestFor(std::move(put_key))), "request");
}

FastRequest FastRecvCall::RequestFor(std::string put_key) const {
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
  request.put_address = reinterpret_cast<uint64_t>(destination_.data());
  request.put_key = std::move(put_key);
  return request;
}

void FastRecvCall::SendToProducer(std::string message, absl::string_view what) {
  data_plane_->SendMessage(
      known_.producer_transport_address, std::move(message),
      [self = shared_from_this(), what = std::string(what)](absl::Status sent) {
        // The transport to the producer failed: it is lost or unreachable,
        // whatever the transport's code.
        if (!sent.ok()) {
          self->Abort(absl::UnavailableError(absl::StrCat("the fast-path ", what,
                                                          " did not reach worker ",
                                                          self->worker_name_, ": ",
                                                          sent.message())));
        }
      });
}

void FastRecvCall::Cancel(const absl::Status& status) {
  bool requested = false;
  {
    std::lock_guard lock(mu_);
    if (!cancelled_.ok()) return;
    cancelled_ = status;
    requested = requested_;
    if (slow_call_ != nullptr) return slow_call_->Cancel(status);
  }
  if (!requested) return Abort(status);
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' withdrawing";
  SendToProducer(EncodeFastWithdrawal({known_.id, step_id_, request_id_}), "withdrawal");
}

void FastRecvCall::Abort(const absl::Status& status) {
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

void FastRecvCall::Told(const FastNotice& notice) {
  if (notice.kind == FastNoticeKind::kReadable) return Read(notice);
  std::shared_ptr<SideTransfer> transfer;
  {
    std::lock_guard lock(mu_);
    dead_ = notice.kind == FastNoticeKind::kDead;
    changed_ = notice.kind == FastNoticeKind::kChanged;
    sent_slow_ = notice.kind == FastNoticeKind::kSlowPath;
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
}

void FastRecvCall::Read(const FastNotice& notice) {
  std::optional<Tensor> destination;
  {
    std::lock_guard lock(mu_);
    destination.swap(read_into_);
  }
  DataPlane* const plane = data_plane_;
  const uint64_t request_id = request_id_;
  if (!destination.has_value()) {
    RDV_LOG(Warning) << "fast path: a readable notice for Recv " << request_id
                     << ", which reads nothing (now)";
    return;
  }
  TransportDescriptor descriptor;
  descriptor.set_op(TRANSFER_OP_GET);
  descriptor.set_transfer_id(notice.transfer_id);
  descriptor.set_length(destination->TotalBytes());
  descriptor.set_address(notice.address);
  descriptor.set_remote_key(notice.remote_key);
  descriptor.set_producer_transport_address(known_.producer_transport_address);
  const FastRelease release{known_.id, step_id_, notice.transfer_id, destination->TotalBytes()};
  const std::string producer = known_.producer_transport_address;
  std::weak_ptr<FastRecvCall> weak = weak_from_this();
  // `destination` lives in the Fetch until the read ends, whatever ended
  // the Recv meanwhile.
  plane->Fetch(descriptor, *std::move(destination),
               [plane, request_id, release, producer, weak](absl::Status read) {
                 plane->SendMessage(producer, EncodeFastRelease(release), [](absl::Status sent) {
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
}

void FastRecvCall::Unregister() {
  std::lock_guard lock(waiting_->mu);
  waiting_->calls.erase(request_id_);
}

void FastRecvCall::TransferDone(absl::Status status) {
  Unregister();
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' ended: " << status;
  bool dead = false, changed = false, slow = false;
  absl::Status ended_by;
  {
    std::lock_guard lock(mu_);
    dead = dead_;
    changed = changed_;
    slow = sent_slow_;
    ended_by = ended_by_;
    transfer_.reset();
    // The producer's access to the destination ends before the Recv does.
    exposed_.reset();
  }
  // Taken whole: the Recv's result, or let go.
  Tensor destination(std::move(destination_));
  if (!ended_by.ok()) return Complete(ended_by, Tensor(), false);
  if (status.ok()) return Complete(absl::OkStatus(), std::move(destination), false);
  if (dead) return Complete(absl::OkStatus(), Tensor(), true);
  if (changed || slow) return FetchBySlowPath(changed);
  Complete(std::move(status), Tensor(), false);
}

void FastRecvCall::FetchBySlowPath(bool held) {
  // A RecvTensor call of its own, bounded as any. This call stays hooked to
  // the rendezvous and passes an abort or a cancellation on to it.
  fallback_.set_fetch_held(held);
  std::shared_ptr<FastRecvCall> self = shared_from_this();
  auto* call = new RecvTensorCall(
      std::move(worker_), data_plane_, std::move(fallback_), MemoryLocation::Host(),
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
