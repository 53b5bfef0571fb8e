#include "control/fast_path.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

FastWays FastWaysFor(const DataPlane& plane, const ControlOptions& options, bool lent) {
  const bool sends = plane.transfer_op() == TRANSFER_OP_TAG;
  const bool puts = (plane.transport().supported_ops() & RDV_TRANSPORT_OP_PUT) != 0;
  const bool reads = sends ? !options.fast_path_writes && lent : options.fast_path_reads;
  return FastWays{puts && !reads && (!sends || options.fast_path_writes), reads};
}

FastPath::FastPath(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr, TensorService& tensors)
    : env_(env), rendezvous_mgr_(rendezvous_mgr), tensors_(tensors) {
  env_.data_plane->SetMessageSink([this](absl::string_view message) { OnMessage(message); });
}

FastPath::~FastPath() { Stop(); }

void FastPath::Stop() {
  env_.data_plane->SetMessageSink(nullptr);
  std::vector<std::shared_ptr<FastRecvCall>> unanswered;
  {
    std::lock_guard lock(waiting_->mu);
    waiting_->stopped = true;
    for (const auto& [request_id, weak] : waiting_->calls) {
      if (std::shared_ptr<FastRecvCall> call = weak.lock()) unanswered.push_back(std::move(call));
    }
  }
  for (const std::shared_ptr<FastRecvCall>& call : unanswered) {
    call->End(absl::CancelledError("the worker is shutting down"));
  }
}

std::shared_ptr<FastRecvCall> FastPath::NewRecv(std::shared_ptr<WorkerClient> worker,
                                                int64_t step_id, std::string key,
                                                KnownFastKey known,
                                                std::shared_ptr<const RecvTensorRequest> fallback,
                                                int64_t request_id,
                                                std::shared_ptr<Buffer> landing, Detach detach,
                                                Done done, bool ahead) {
  recvs_started_.fetch_add(1);
  if (ahead) read_ahead_.fetch_add(1);
  return std::make_shared<FastRecvCall>(env_.data_plane, waiting_, std::move(worker), step_id,
                                        std::move(key), std::move(known), std::move(fallback),
                                        request_id, std::move(landing), std::move(detach),
                                        std::move(done), ahead);
}

void FastPath::StartAll(const std::vector<std::shared_ptr<FastRecvCall>>& calls) {
  const size_t limit = env_.data_plane->transport().max_message_bytes();
  const std::string& producer = calls.front()->producer_address();
  std::vector<std::string> batch;
  std::vector<std::shared_ptr<FastRecvCall>> batched;
  size_t bytes = 0;
  for (const std::shared_ptr<FastRecvCall>& call : calls) {
    std::optional<std::string> request = call->Prepare();
    if (!request.has_value()) continue;
    if (!batch.empty() && (batch.size() == kMaxBatchedRequests ||
                           FastRequestsBytes(batch.size() + 1, bytes + request->size()) > limit)) {
      SendBatch(producer, std::move(batch), std::move(batched));
      batch.clear();
      batched.clear();
      bytes = 0;
    }
    bytes += request->size();
    batch.push_back(*std::move(request));
    batched.push_back(call);
  }
  if (!batch.empty()) SendBatch(producer, std::move(batch), std::move(batched));
}

void FastPath::SendBatch(const std::string& producer, std::vector<std::string> requests,
                         std::vector<std::shared_ptr<FastRecvCall>> calls) {
  waiting_->request_messages.fetch_add(1);
  // One request goes as itself: a batch of one would only be longer.
  std::string message = requests.size() == 1 ? std::move(requests.front())
                                             : EncodeFastRequests(requests);
  env_.data_plane->SendMessage(producer, std::move(message),
                               [calls = std::move(calls)](absl::Status sent) {
                                 for (const auto& call : calls) call->NotSent(sent, "request");
                               });
}

void FastPath::OnMessage(absl::string_view message) {
  absl::StatusOr<FastKind> kind = PeekFastKind(message);
  if (!kind.ok()) return Refuse(kind.status());
  if (*kind == FastKind::kRequests) {
    absl::StatusOr<std::vector<FastRequest>> requests = DecodeFastRequests(message);
    if (!requests.ok()) return Refuse(requests.status());
    for (const FastRequest& request : *requests) OnRequest(request);
    return;
  }
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
        std::pair{"rdv_fast_path_read_ahead_total", read_ahead()},
        std::pair{"rdv_fast_path_recvs_fetched_by_recv_tensor_total",
                  recvs_fetched_by_recv_tensor()},
        std::pair{"rdv_fast_path_recvs_asked_again_total", recvs_asked_again()},
        std::pair{"rdv_fast_path_requests_served_total", requests_served()},
        std::pair{"rdv_fast_path_request_messages_total", request_messages()},
        std::pair{"rdv_fast_path_requests_overflowed_total", requests_overflowed()},
        std::pair{"rdv_fast_path_values_lent_total", values_lent()}}) {
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
  if (request.held) return ServeHeld(request, *entry, *key);
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

void FastPath::ServeHeld(const FastRequest& request, const FastKeyIds::Entry& entry,
                         const ParsedKey& key) {
  {
    // A withdrawal sent before the Recv asked again: the value it asks for
    // was taken already, and comes all the same.
    std::lock_guard lock(serving_mu_);
    early_withdrawals_.erase({request.key_id, request.step_id, request.request_id});
  }
  absl::StatusOr<TensorService::HeldValue> held =
      tensors_.TakeHeldValue(request.step_id, static_cast<int64_t>(request.request_id), entry.key);
  if (!held.ok()) {
    // The consumer the id was given to hears why; nothing else is told.
    Refuse(held.status());
    return Notify(env_.data_plane, entry.consumer_address,
                  Failed(request.request_id, "held value", held.status()));
  }
  requests_served_.fetch_add(1);
  Answer(request, entry, key, absl::OkStatus(), held->value, held->is_dead, false);
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
  // A read of memory peers cannot copy themselves would be served by this
  // worker's transport in software: such a value goes the slow way once,
  // and its answer tells the consumer how the key's values come now.
  const bool read = request.read || (!request.put && plane->transfer_op() == TRANSFER_OP_GET);
  const bool unreadable = read && value.TotalBytes() > 0 && plane->OpFor(value) != TRANSFER_OP_GET;
  const bool reshaped = !ShapeMatches(request, value);
  // A value that should come another way than the request asks (a key
  // whose values moved into memory the consumer reads itself) is fetched
  // by RecvTensor, whose answer teaches the key the new way.
  const bool another_way = reshaped && [&] {
    const FastWays ways =
        FastWaysFor(*plane, env_.options, plane->OpFor(value) == TRANSFER_OP_GET);
    return ways.put != request.put || ways.get != request.read;
  }();
  if (!value.location().is_host() || unreadable ||
      (reshaped && (request.held || another_way || !DTypeIsMemcpyable(value.dtype()) ||
                    value.shape().rank() > kFastPathMaxDims))) {
    tensors_.HoldForFetch(request.step_id, static_cast<int64_t>(id), key, value, false);
    return Notify(plane, entry.consumer_address,
                  FastNotice{id, FastNoticeKind::kChanged, 0, ""});
  }
  if (reshaped) {
    tensors_.HoldForFetch(request.step_id, static_cast<int64_t>(id), key, value, false);
    return Notify(plane, entry.consumer_address, Reshaped(id, value));
  }
  RDV_LOG(Debug) << "fast path: request " << id << " answered by a "
                 << (request.put ? "write" : read ? "readable notice" : "tagged send");
  env_.stats->Sent(SentPath::kFastPath, value.TotalBytes());
  const ConsumerWatcher consumer(*env_.worker_cache, env_.worker_name, key);
  if (request.put) return Write(request, entry.consumer_address, value, consumer);
  if (read) return Lend(request, entry, key, value, consumer);
  absl::StatusOr<TransportDescriptor> offered =
      plane->Offer(TRANSFER_OP_TAG, request.step_id, static_cast<int64_t>(id), value,
                   entry.consumer_address, consumer,
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
      plane->Offer(TRANSFER_OP_GET, request.step_id, static_cast<int64_t>(id), value,
                   entry.consumer_address, consumer, [](absl::Status) {});
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
  values_lent_.fetch_add(1);
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

FastNotice FastPath::Reshaped(uint64_t request_id, const Tensor& value) {
  FastNotice notice{request_id, FastNoticeKind::kReshaped, 0, ""};
  notice.dtype = static_cast<int32_t>(value.dtype());
  const absl::Span<const int64_t> dims = value.shape().dims();
  notice.num_dims = static_cast<uint32_t>(dims.size());
  std::copy(dims.begin(), dims.end(), notice.dims);
  return notice;
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
  if (absl::Status taken = call->Told(notice); !taken.ok()) Refuse(taken);
}

}  // namespace rdv::control
