// The receiving side's channels of a torch rank: one per (source rank,
// tag), each one rdv key whose values arrive in the order they were sent
// (a key's FIFO). A remote Recv travels to its producer as a request, and
// requests of one key may overtake each other on the way (two RecvTensor
// calls), so a channel has one Recv in rdv at a time: the next is posted
// when the one before ends, on whichever thread ended it. One key per
// channel is what lets rdv's fast path serve its Recvs (a recurring key).
// Shared with rdv's callbacks, which may outlive the process group.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "core/status.h"

namespace rdv::pytorch {

class RecvChannels : public std::enable_shared_from_this<RecvChannels> {
 public:
  // Posts one Recv into rdv, and calls `ended` once when that Recv ends.
  using Post = absl::AnyInvocable<void(std::function<void()> ended) &&>;
  // Fails a Recv that is never posted, with the reason.
  using Refuse = absl::AnyInvocable<void(const absl::Status& why) &&>;

  // Posts now when channel (`peer`, `tag`) is idle, else once the Recvs
  // queued before it have ended. After Close, refuses at once.
  void Enqueue(int peer, int tag, Post post, Refuse refuse);

  // Nothing more is posted: the Recvs still queued are refused with `why`.
  // Returns once no post is under way (posts do not block).
  void Close(const absl::Status& why);

 private:
  using ChannelId = std::pair<int, int>;
  struct Pending {
    Post post;
    Refuse refuse;
  };
  struct Channel {
    bool busy = false;  // a Recv of it is in rdv
    std::deque<Pending> queued;
  };

  // With posting_ counted for it.
  void Run(ChannelId id, Pending pending);
  // The channel's Recv in rdv ended.
  void Ended(ChannelId id);

  std::mutex mu_;
  std::condition_variable posts_returned_;
  std::map<ChannelId, Channel> channels_;  // guarded by mu_
  int posting_ = 0;                        // guarded by mu_: posts under way
  absl::Status closed_;                    // guarded by mu_: why, once closed
};

}  // namespace rdv::pytorch
