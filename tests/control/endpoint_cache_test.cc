// The data plane's endpoint cache over the real UCX plugin: connects run on
// its own thread, once per address, and every caller hears back once.
#include "control/endpoint_cache.h"

#include <atomic>
#include <thread>

#include "absl/time/time.h"
#include "core/notification.h"
#include "gtest/gtest.h"
#include "plugin/transport.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

struct Heard {
  Notification done;
  absl::Status status;
  EndpointCache::Endpoint endpoint;
  std::thread::id thread;

  EndpointCache::Ready Callback() {
    return [this](absl::StatusOr<EndpointCache::Endpoint> outcome) {
      status = outcome.status();
      if (outcome.ok()) endpoint = *outcome;
      thread = std::this_thread::get_id();
      done.Notify();
    };
  }
};

class EndpointCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto peer = plugin::Transport::Load("ucx", {{"tls", "tcp"}});
    auto own = plugin::Transport::Load("ucx", {{"tls", "tcp"}});
    ASSERT_TRUE(peer.ok()) << peer.status();
    ASSERT_TRUE(own.ok()) << own.status();
    peer_ = *peer;
    own_ = *own;
    auto address = peer_->LocalAddress();
    ASSERT_TRUE(address.ok()) << address.status();
    peer_address_ = *address;
  }

  std::shared_ptr<plugin::Transport> peer_;
  std::shared_ptr<plugin::Transport> own_;
  std::string peer_address_;
};

TEST_F(EndpointCacheTest, ConnectsOffTheCallersThreadOnceAndKeepsTheEndpoint) {
  EndpointCache cache(own_);
  Heard first, second;
  cache.With(peer_address_, first.Callback());
  cache.With(peer_address_, second.Callback());
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(second.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_NE(first.thread, std::this_thread::get_id());
  EXPECT_EQ(first.endpoint, second.endpoint) << "one connect for both";
  // The endpoint is kept once the connector has called back everyone who
  // asked meanwhile; from then on it is handed over at once, on this thread.
  EXPECT_TRUE(rdv::testing::PollUntil([&] {
    Heard kept;
    cache.With(peer_address_, kept.Callback());
    if (!kept.done.WaitForNotificationWithTimeout(kWait)) return false;
    EXPECT_EQ(kept.endpoint, first.endpoint) << "no second connect";
    return kept.thread == std::this_thread::get_id();
  })) << "a kept endpoint is handed over at once";
}

TEST_F(EndpointCacheTest, AFailedConnectReachesItsCallerAndIsNotKept) {
  EndpointCache cache(own_);
  Heard refused;
  cache.With("not an address", refused.Callback());
  ASSERT_TRUE(refused.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument) << refused.status;
  Heard again;
  cache.With("not an address", again.Callback());
  ASSERT_TRUE(again.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_NE(again.thread, std::this_thread::get_id()) << "connected anew, not kept";
}

TEST_F(EndpointCacheTest, ForgottenEndpointIsMadeAnew) {
  EndpointCache cache(own_);
  Heard first;
  cache.With(peer_address_, first.Callback());
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(first.status.ok()) << first.status;
  cache.Forget(peer_address_);
  Heard second;
  cache.With(peer_address_, second.Callback());
  ASSERT_TRUE(second.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_NE(second.endpoint, first.endpoint);
}

// A failed transfer may forget the endpoint while its connect is still
// calling back the callers who waited for it: it must not be kept then.
TEST_F(EndpointCacheTest, AnEndpointForgottenWhileHandedOutIsNotKept) {
  EndpointCache cache(own_);
  Heard first, during, after;
  cache.With(peer_address_, [&](absl::StatusOr<EndpointCache::Endpoint> outcome) {
    cache.Forget(peer_address_);
    cache.With(peer_address_, during.Callback());
    EXPECT_FALSE(during.done.HasBeenNotified()) << "asked after the Forget: connects anew";
    first.Callback()(std::move(outcome));
  });
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(during.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_TRUE(during.status.ok()) << during.status;
  EXPECT_NE(during.endpoint, first.endpoint);
  cache.With(peer_address_, after.Callback());
  ASSERT_TRUE(after.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(after.endpoint, during.endpoint) << "the new endpoint is kept";
}

TEST_F(EndpointCacheTest, AfterShutdownEveryCallerHearsCancelledAtOnce) {
  EndpointCache cache(own_);
  Heard kept;
  cache.With(peer_address_, kept.Callback());
  ASSERT_TRUE(kept.done.WaitForNotificationWithTimeout(kWait));
  cache.Shutdown();
  Heard late;
  cache.With(peer_address_, late.Callback());
  ASSERT_TRUE(late.done.HasBeenNotified());
  EXPECT_EQ(late.status.code(), absl::StatusCode::kCancelled) << late.status;
}

}  // namespace
}  // namespace rdv::control
