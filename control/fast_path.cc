#include "control/fast_path.h"

#include <algorithm>
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
  absl::StatusOr<FastNotice> notice = DecodeFastNotice(message);
  return notice.ok() ? OnNotice(*notice) : Refuse(notice.status());
}

void FastPath::AppendStats(GetStatsResponse* response) const {
  for (const auto& [name, value] :
       {std::pair{"rdv_fast_path_messages_refused_total", refused()},
        std::pair{"rdv_fast_path_recvs_started_total", recvs_started()},
        std::pair{"rdv_fast_path_requests_served_total", requests_served()}}) {
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
  requests_served_.fetch_add(1);
  RDV_LOG(Debug) << "fast path: request " << request.request_id << " for '" << entry->key
                 << "' step " << request.step_id << " (" << request.bytes << " bytes)";
  RendezvousArgs args;
  args.as_sent = true;  // a GPU value is the slow path's (a changed notice)
  rendezvous_mgr_.Find(request.step_id)
      ->RecvAsync(*key, args,
                  [this, request, entry = *std::move(entry), parsed = *key](
                      const absl::Status& status, const RendezvousArgs&, const RendezvousArgs&,
                      const Tensor& value, bool is_dead) {
                    Answer(request, entry, parsed, status, value, is_dead);
                  });
}

void FastPath::Answer(const FastRequest& request, const FastKeyIds::Entry& entry,
                      const ParsedKey& key, const absl::Status& status, const Tensor& value,
                      bool is_dead) {
  DataPlane* const plane = env_.data_plane;
  const uint64_t id = request.request_id;
  if (!status.ok()) return Notify(plane, entry.consumer_address, Failed(id, "Recv", status));
  if (is_dead) {
    return Notify(plane, entry.consumer_address, FastNotice{id, FastNoticeKind::kDead, 0, ""});
  }
  if (!value.location().is_host() || !ShapeMatches(request, value)) {
    tensors_.HoldForFetch(request.step_id, static_cast<int64_t>(id), key, value, false);
    return Notify(plane, entry.consumer_address,
                  FastNotice{id, FastNoticeKind::kChanged, 0, ""});
  }
  RDV_LOG(Debug) << "fast path: request " << id << " answered by a tagged send";
  env_.stats->Sent(SentPath::kFastPath, value.TotalBytes());
  const ConsumerWatcher consumer(*env_.worker_cache, env_.worker_name, key);
  absl::StatusOr<TransportDescriptor> offered = plane->Offer(
      request.step_id, static_cast<int64_t>(id), value, entry.consumer_address, consumer,
      [plane, id, address = entry.consumer_address](absl::Status sent) {
        if (!sent.ok()) Notify(plane, address, Failed(id, "tagged send", sent));
      });
  if (!offered.ok()) Notify(plane, entry.consumer_address, Failed(id, "offer", offered.status()));
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
  destination_ = *std::move(destination);
  TransportDescriptor descriptor;
  descriptor.set_op(TRANSFER_OP_TAG);
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
  {
    std::lock_guard lock(mu_);
    transfer_ = transfer;
  }
  FastRequest request;
  request.key_id = known_.id;
  request.step_id = step_id_;
  request.request_id = request_id_;
  request.bytes = destination_.TotalBytes();
  request.dtype = static_cast<int32_t>(known_.dtype);
  const absl::Span<const int64_t> dims = known_.shape.dims();
  request.num_dims = static_cast<uint32_t>(dims.size());
  std::copy(dims.begin(), dims.end(), request.dims);
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' requested";
  plane->SendMessage(known_.producer_transport_address, EncodeFastRequest(request),
                     [self](absl::Status sent) {
                       // The transport to the producer failed: it is lost
                       // or unreachable, whatever the transport's code.
                       if (!sent.ok()) {
                         self->Abort(absl::UnavailableError(absl::StrCat(
                             "the fast-path request did not reach worker ",
                             self->worker_name_, ": ", sent.message())));
                       }
                     });
}

void FastRecvCall::Abort(const absl::Status& status) {
  std::shared_ptr<SideTransfer> transfer;
  {
    std::lock_guard lock(mu_);
    if (ended_by_.ok()) ended_by_ = status;
    transfer = transfer_;
  }
  if (transfer != nullptr) transfer->Cancel();
}

void FastRecvCall::Told(const FastNotice& notice) {
  std::shared_ptr<SideTransfer> transfer;
  {
    std::lock_guard lock(mu_);
    dead_ = notice.kind == FastNoticeKind::kDead;
    changed_ = notice.kind == FastNoticeKind::kChanged;
    if (notice.kind == FastNoticeKind::kFailed && ended_by_.ok()) {
      ended_by_ = absl::Status(static_cast<absl::StatusCode>(notice.code), notice.message);
    }
    transfer = transfer_;
  }
  // No send will match the receive: it ends now, CANCELLED.
  if (transfer != nullptr) transfer->Cancel();
}

void FastRecvCall::Unregister() {
  std::lock_guard lock(waiting_->mu);
  waiting_->calls.erase(request_id_);
}

void FastRecvCall::TransferDone(absl::Status status) {
  Unregister();
  RDV_LOG(Debug) << "fast path: Recv " << request_id_ << " of '" << key_ << "' ended: " << status;
  bool dead = false, changed = false;
  absl::Status ended_by;
  {
    std::lock_guard lock(mu_);
    dead = dead_;
    changed = changed_;
    ended_by = ended_by_;
    transfer_.reset();
  }
  if (!ended_by.ok()) {
    destination_ = Tensor();
    return Complete(ended_by, Tensor(), false);
  }
  if (status.ok()) return Complete(absl::OkStatus(), std::move(destination_), false);
  destination_ = Tensor();
  if (dead) return Complete(absl::OkStatus(), Tensor(), true);
  if (changed) return FetchChanged();
  Complete(std::move(status), Tensor(), false);
}

void FastRecvCall::FetchChanged() {
  // The fetch is a RecvTensor call of its own, bounded as any: this call
  // leaves the rendezvous' watch first.
  std::move(detach_)(this);
  fallback_.set_fetch_held(true);
  auto* call = new RecvTensorCall(std::move(worker_), data_plane_,
                                  std::move(fallback_), MemoryLocation::Host(),
                                  [](AbortableCall*) {}, std::move(done_));
  call->Start();
}

void FastRecvCall::Complete(absl::Status status, Tensor tensor, bool is_dead) {
  worker_.reset();
  std::move(detach_)(this);
  std::move(done_)(std::move(status), std::move(tensor), is_dead);
}

}  // namespace rdv::control
