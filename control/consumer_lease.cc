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
                                 const ParsedKey& key) {
  const std::string consumer = key.dst().WorkerName();
  if (consumer == self) return;
  absl::StatusOr<std::shared_ptr<WorkerClient>> client = workers.Get(consumer);
  if (!client.ok()) {
    RDV_LOG(Debug) << "not watching consumer " << consumer << ": " << client.status();
    return;
  }
  consumer_ = *std::move(client);
}

ConsumerLease ConsumerWatcher::Lease(ConsumerLost lost) const {
  if (consumer_ == nullptr) return nullptr;
  return std::make_shared<WatchedConsumer>(consumer_, std::move(lost));
}

}  // namespace rdv::control
