// The Rendezvous contract as one suite of cases, run on every
// implementation of it: tests/core/rendezvous_conformance_test.cc
// instantiates it for the in-process rendezvous,
// tests/control/rpc_rendezvous_conformance_test.cc for RpcRemoteRendezvous
// between two workers, over every protocol. Keys go from kCpu0 to kCpu1
// (tests/test_util.h).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "core/rendezvous.h"
#include "gtest/gtest.h"

namespace rdv::conformance {

struct Backend {
  const char* name;
  // A fresh rendezvous per case; destroying it is the "destroyed" of
  // DestroyingFailsWaiters.
  std::function<std::unique_ptr<Rendezvous>()> make;
  // Recvs now waiting, so that a test can act on a Recv known to wait.
  std::function<size_t(Rendezvous&)> waiters;
  // Recvs of one key get its values in the order the Recvs were made. Not
  // across workers: each Recv is its own call, and the calls reach the
  // producer in any order (as in TensorFlow); the values still arrive once
  // each, in Send order to whichever Recv the producer serves next.
  bool recvs_of_one_key_in_order = true;
  // A Recv cancelled just as the producer served it may take the value
  // with it: its answer was on its way when the cancellation arrived
  // (across workers, as in TensorFlow). One cancelled before it was served
  // leaves the value for the next Recv.
  bool cancelled_recv_may_take_a_value = false;
};

class RendezvousConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  std::unique_ptr<Rendezvous> rendezvous_ = GetParam().make();
};

// ctest lists each case under the backend's name.
inline void PrintTo(const Backend& backend, std::ostream* out) { *out << backend.name; }

// gtest names each instantiation's cases by the backend's name.
inline std::string BackendName(const ::testing::TestParamInfo<Backend>& param_info) {
  return param_info.param.name;
}

}  // namespace rdv::conformance
