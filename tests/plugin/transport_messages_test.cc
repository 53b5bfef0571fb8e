// The transport conformance suite's messages (post_message): delivery on
// the peer's progress thread, the size limit, and a burst past every queue.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/plugin/transport_conformance.h"

namespace rdv::plugin::conformance {
namespace {

// What a context's message handler heard, and on which threads.
class Inbox {
 public:
  MessageHandler Handler() {
    return [this](absl::string_view message) {
      std::lock_guard lock(mu_);
      messages_.emplace_back(message);
      threads_.insert(std::this_thread::get_id());
      arrived_.notify_all();
    };
  }
  // The messages, once `count` have arrived (fewer after 30 s).
  std::vector<std::string> WaitFor(size_t count) {
    std::unique_lock lock(mu_);
    arrived_.wait_for(lock, std::chrono::seconds(30), [&] { return messages_.size() >= count; });
    return messages_;
  }
  std::set<std::thread::id> threads() {
    std::lock_guard lock(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable arrived_;
  std::vector<std::string> messages_;
  std::set<std::thread::id> threads_;
};

// Messages of every length up to the largest reach the peer's handler
// whole, on its progress thread; a longer one is refused with no callback;
// a transport without messages refuses at once.
TEST_P(TransportConformanceTest, MessagesReachThePeersHandlerOnItsProgressThread) {
  Inbox inbox;
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true, inbox.Handler());
  auto endpoint = a->Connect(*b->LocalAddress());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  if (!a->carries_messages()) {
    Completion refused;
    a->SendMessage(**endpoint, "hello", refused.Callback());
    ASSERT_TRUE(refused.Wait());
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnimplemented) << refused.status;
    GTEST_SKIP() << GetParam() << " carries no messages";
  }
  const size_t largest = a->max_message_bytes();
  std::vector<std::string> sent;
  for (size_t length : {size_t{1}, size_t{8}, size_t{64}, largest / 2, largest}) {
    for (int copy = 0; copy < 20; ++copy) {
      sent.push_back(std::string(length, static_cast<char>('a' + sent.size() % 26)));
    }
  }
  std::vector<Completion> done(sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    std::string message = sent[i];
    a->SendMessage(**endpoint, message, done[i].Callback());
    message.assign(message.size(), '!');  // copied before SendMessage returned
  }
  for (Completion& completion : done) {
    ASSERT_TRUE(completion.Wait());
    EXPECT_TRUE(completion.status.ok()) << completion.status;
  }
  std::vector<std::string> received = inbox.WaitFor(sent.size());
  std::sort(sent.begin(), sent.end());
  std::sort(received.begin(), received.end());
  EXPECT_EQ(received, sent);
  EXPECT_EQ(inbox.threads().count(std::this_thread::get_id()), 0u);
  Completion refused;
  a->SendMessage(**endpoint, std::string(largest + 1, 'x'), refused.Callback());
  ASSERT_TRUE(refused.Wait());
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument) << refused.status;
  EXPECT_EQ(refused.thread, std::this_thread::get_id());
}

// A burst of far more messages than the receiver has slots for and the
// sender has room for in flight: each arrives once, none is lost while the
// receiver catches up.
TEST_P(TransportConformanceTest, ABurstOfMessagesPastEveryQueueAllArrive) {
  Inbox inbox;
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true, inbox.Handler());
  if (!a->carries_messages()) GTEST_SKIP() << GetParam() << " carries no messages";
  auto endpoint = a->Connect(*b->LocalAddress());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  constexpr int kMessages = 3000;
  std::vector<std::string> sent;
  std::vector<Completion> done(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    sent.push_back(absl::StrCat("message ", i));
    a->SendMessage(**endpoint, sent.back(), done[i].Callback());
  }
  for (Completion& completion : done) {
    ASSERT_TRUE(completion.Wait());
    ASSERT_TRUE(completion.status.ok()) << completion.status;
  }
  std::vector<std::string> received = inbox.WaitFor(sent.size());
  std::sort(sent.begin(), sent.end());
  std::sort(received.begin(), received.end());
  EXPECT_EQ(received, sent);
}

// Work posted the moment a context is made completes: its completion may
// come before the progress thread first waits (verbs lost such a one when
// it armed its completion queue after the completion landed).
TEST_P(TransportConformanceTest, AMessagePostedAsAContextStartsCompletes) {
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/false, [](absl::string_view) {});
  if (!b->carries_messages()) GTEST_SKIP() << GetParam() << " carries no messages";
  const std::string address = *b->LocalAddress();
  for (int round = 0; round < 10; ++round) {
    // Busy neighbours keep the new progress thread from its first run
    // while the message goes, as a loaded worker process does.
    std::atomic<bool> busy{true};
    std::vector<std::thread> neighbours;
    for (int i = 0; i < 2 * static_cast<int>(std::thread::hardware_concurrency()); ++i) {
      neighbours.emplace_back([&busy] {
        while (busy.load(std::memory_order_relaxed)) {
        }
      });
    }
    RDV_LOAD_OR_SKIP(a, GetParam());
    auto endpoint = a->Connect(address);
    Completion sent;
    if (endpoint.ok()) a->SendMessage(**endpoint, "first", sent.Callback());
    busy = false;
    for (std::thread& neighbour : neighbours) neighbour.join();
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    ASSERT_TRUE(sent.Wait()) << "round " << round << ": the first message's completion was lost";
    EXPECT_TRUE(sent.status.ok()) << sent.status;
  }
}

// Where the transport says messages follow puts, a message posted right
// behind a put finds the put's bytes already in place when it arrives,
// round after round, the put several chunks long.
TEST_P(TransportConformanceTest, AMessageBehindAPutFindsItsBytesWhereTheTransportSaysSo) {
  constexpr size_t kLength = (size_t{3} << 20) + 123;
  constexpr int kRounds = 8;
  std::atomic<const unsigned char*> destination_bytes{nullptr};
  std::vector<int> rounds_found_whole;  // written on b's progress thread only
  std::vector<Notification> arrived(kRounds);
  MessageHandler check = [&](absl::string_view message) {
    const int round = std::stoi(std::string(message));
    const unsigned char* bytes = destination_bytes.load();
    bool whole = true;
    for (size_t i = 0; i < kLength && whole; ++i) {
      whole = bytes[i] == static_cast<unsigned char>(i * 7 + round);
    }
    if (whole) rounds_found_whole.push_back(round);
    arrived[round].Notify();
  };
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true, std::move(check));
  if (!a->messages_follow_puts()) GTEST_SKIP() << GetParam() << " does not order them";
  auto source = a->Allocate(kLength);
  auto destination = b->Allocate(kLength);
  ASSERT_TRUE(source.ok() && destination.ok());
  destination_bytes = static_cast<const unsigned char*>((*destination)->address());
  auto endpoint = a->Connect(*b->LocalAddress());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  for (int round = 0; round < kRounds; ++round) {
    auto* bytes = static_cast<unsigned char*>((*source)->address());
    for (size_t i = 0; i < kLength; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + round);
    Completion put;
    Completion message;
    a->Put(**endpoint, bytes, **source, reinterpret_cast<uint64_t>((*destination)->address()),
           (*destination)->remote_key(), kLength, put.Callback());
    a->SendMessage(**endpoint, std::to_string(round), message.Callback());
    ASSERT_TRUE(put.Wait() && message.Wait());
    ASSERT_TRUE(put.status.ok() && message.status.ok()) << put.status << "; " << message.status;
    // The next round's put must not overwrite what this message checks.
    ASSERT_TRUE(arrived[round].WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  EXPECT_EQ(rounds_found_whole.size(), static_cast<size_t>(kRounds))
      << "a message arrived before its put's bytes";
}

}  // namespace
}  // namespace rdv::plugin::conformance
