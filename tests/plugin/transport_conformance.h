// The transport conformance suite's shared parts: each case runs against
// every transport plugin (TransportConformanceTest's parameter is its name),
// in whichever file holds it; transport_test.cc instantiates the suite.
#pragma once

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "core/notification.h"
#include "gtest/gtest.h"
#include "plugin/transport.h"
#include "tests/plugin/transport_parameter.h"

namespace rdv::plugin::conformance {

// A parameter as a test name: "ucx:memory=mapped" is ucx_memory_mapped.
inline std::string ParameterName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
}

// Loads the plugin `parameter` names with its setting, or says why the
// test cannot run here: the verbs transport needs an RDMA device
// (tests/softroce runs these inside a SoftRoCE guest, with
// RDV_TEST_REQUIRE_RDMA=1 so that a missing device fails instead).
// RDV_TEST_PEER_IB_DEVICE puts the peer context on another device.
inline std::shared_ptr<Transport> LoadOrSkip(const std::string& parameter, bool peer = false,
                                             MessageHandler on_message = nullptr) {
  const std::string name = PluginOf(parameter);
  const char* peer_device = std::getenv("RDV_TEST_PEER_IB_DEVICE");
  TransportSettings settings = SettingsOf(parameter);
  if (peer && peer_device != nullptr && name == "verbs") settings["device"] = peer_device;
  auto transport = Transport::Load(name, settings, std::move(on_message));
  if (!transport.ok() && absl::IsUnavailable(transport.status()) &&
      std::getenv("RDV_TEST_REQUIRE_RDMA") == nullptr) {
    return nullptr;
  }
  EXPECT_TRUE(transport.ok()) << transport.status();
  return transport.ok() ? *transport : nullptr;
}

#define RDV_LOAD_OR_SKIP(var, ...)                                                   \
  auto var = LoadOrSkip(__VA_ARGS__);                                                \
  if (var == nullptr) {                                                              \
    if (HasFailure()) return;                                                        \
    GTEST_SKIP() << "no device for transport " << GetParam() << " on this machine";  \
  }

// A completion: how often it ran, with what, and on which thread.
struct Completion {
  Notification done;
  std::atomic<int> calls{0};
  absl::Status status;
  std::thread::id thread;

  TransportDone Callback() {
    return [this](absl::Status s) {
      status = s;
      thread = std::this_thread::get_id();
      if (calls.fetch_add(1) == 0) done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(30)); }
};

// Every transport plugin passes these.
class TransportConformanceTest : public ::testing::TestWithParam<std::string> {};

}  // namespace rdv::plugin::conformance
