#include "control/consumer_lease.h"

#include <utility>

#include "core/logging.h"

namespace rdv::control {
namespace {

// Unwatches when the last holder lets go; the client's calls count keeps
// the cache from letting go of the channel first (control/worker_cache.h).
class WatchedConsumer {
 public:
  WatchedConsumer(std::shared_ptr<WorkerClient> consumer, ConsumerLost lost)
      : consumer_(std::move(consumer)), calls_(consumer_->calls) {
    calls_->Begin();
    id_ = consumer_->watch->WatchOnceAnswered(
        [lost = std::move(lost)](const absl::Status& status) mutable {
          if (absl::IsUnavailable(status)) std::move(lost)();
        });
  }
  ~WatchedConsumer() {
    consumer_->watch->Unwatch(id_);
    consumer_.reset();
    calls_->End();
  }
  WatchedConsumer(const WatchedConsumer&) = delete;
  WatchedConsumer& operator=(const WatchedConsumer&) = delete;

 private:
  std::shared_ptr<WorkerClient> consumer_;
  const std::shared_ptr<CallsInFlight> calls_;
  uint64_t id_ = 0;
};

}  // namespace

ConsumerWatcher::ConsumerWatcher(WorkerCache& workers, const std::string& self,
                                 const ParsedKey& key)
    : consumer_(key.dst().WorkerName()) {
  if (consumer_ != self) workers_ = &workers;
}

ConsumerLease ConsumerWatcher::Lease(ConsumerLost lost) const {
  if (workers_ == nullptr) return nullptr;
  absl::StatusOr<std::shared_ptr<WorkerClient>> client = workers_->Get(consumer_);
  if (!client.ok()) {
    RDV_LOG(Debug) << "not watching consumer " << consumer_ << ": " << client.status();
    return nullptr;
  }
  return std::make_shared<WatchedConsumer>(*std::move(client), std::move(lost));
}

}  // namespace rdv::control
