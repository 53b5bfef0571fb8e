// The fast path's fixtures of the cross-process conformance suite
// (remote_conformance.h): its cases are in remote_fast_path_test.cc,
// remote_fast_path_metadata_test.cc and remote_fast_path_gpu_test.cc, its
// instantiations in remote_conformance_test.cc with the others.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "gtest/gtest.h"

#include "tests/control/remote_conformance.h"

namespace rdv::control::remote_test {

// RDV_FAST_PATH on.
class RemoteFastPathTest : public RemoteConformanceTest {
 protected:
  void SetUp() override {
    RemoteConformanceTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_NE(consumer_->fast_path(), nullptr)
        << "RDV_FAST_PATH=1 and a data plane: it should be on";
  }
  // FastPathWithdrawnRecvLosesNoValue; `fast_recvs`: the fast Recvs its
  // ten cancelled Recvs start, when each asks for itself.
  void ExpectWithdrawnRecvsLoseNoValue(std::optional<int64_t> fast_recvs);
  // FastPathRecvCancelledAfterAskingAgainLosesNoValue; `ends_with_value`:
  // each cancelled Recv must end with its value (it asks the producer
  // itself, and a held request is never withdrawn).
  void ExpectRecvsCancelledAfterAskingAgainLoseNoValue(bool ends_with_value);
  // Sends `messages` to the transport `address` from a transport of the
  // workers' kind that no handshake admitted, then waits (bounded) until
  // `all_refused` holds. The sender stays up until then: a message whose
  // send completed may still be on its way.
  ::testing::AssertionResult SendForged(const std::string& address,
                                        const std::vector<std::string>& messages,
                                        absl::FunctionRef<bool()> all_refused);
};

// The fast path with read-ahead off: a FIFO key's every Recv asks the
// producer itself, which is what the cases of withdrawal test.
class RemoteFastPathWithoutReadAheadTest : public RemoteFastPathTest {
 protected:
  void SetUp() override {
    read_ahead_bytes_ = 0;
    RemoteFastPathTest::SetUp();
  }
};

// The fast path where there is a GPU: without one, skipped before SetUp
// starts the workers.
class RemoteFastPathGpuTest : public RemoteFastPathTest {
 protected:
  void SetUp() override {
    RDV_SKIP_WITHOUT_GPUS(1);
    RemoteFastPathTest::SetUp();
  }
};

}  // namespace rdv::control::remote_test
