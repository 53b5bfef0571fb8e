#include "pytorch/recv_channels.h"

namespace rdv::pytorch {

void RecvChannels::Enqueue(int peer, int tag, Post post, Refuse refuse) {
  const ChannelId id{peer, tag};
  absl::Status closed;
  {
    std::lock_guard lock(mu_);
    closed = closed_;
    if (closed.ok()) {
      Channel& channel = channels_[id];
      if (channel.busy) {
        channel.queued.push_back({std::move(post), std::move(refuse)});
        return;
      }
      channel.busy = true;
      ++posting_;
    }
  }
  if (!closed.ok()) return std::move(refuse)(closed);
  Run(id, {std::move(post), std::move(refuse)});
}

void RecvChannels::Run(ChannelId id, Pending pending) {
  std::move(pending.post)([self = shared_from_this(), id] { self->Ended(id); });
  std::lock_guard lock(mu_);
  if (--posting_ == 0) posts_returned_.notify_all();
}

void RecvChannels::Ended(ChannelId id) {
  Pending next;
  {
    std::lock_guard lock(mu_);
    Channel& channel = channels_[id];
    if (channel.queued.empty()) {
      channel.busy = false;
      return;
    }
    // Close takes every queued Recv, so a closed channel's queue is empty.
    next = std::move(channel.queued.front());
    channel.queued.pop_front();
    ++posting_;
  }
  Run(id, std::move(next));
}

void RecvChannels::Close(const absl::Status& why) {
  std::vector<Pending> refused;
  {
    std::unique_lock lock(mu_);
    closed_ = why;
    for (auto& [id, channel] : channels_) {
      for (Pending& pending : channel.queued) refused.push_back(std::move(pending));
      channel.queued.clear();
    }
    posts_returned_.wait(lock, [this] { return posting_ == 0; });
  }
  for (Pending& pending : refused) std::move(pending.refuse)(why);
}

}  // namespace rdv::pytorch
