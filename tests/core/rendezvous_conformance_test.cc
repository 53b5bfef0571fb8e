// The Rendezvous conformance suite (rendezvous_conformance.h) on the
// in-process rendezvous.
#include "core/intra_process_rendezvous.h"
#include "core/local_rendezvous.h"
#include "tests/core/rendezvous_conformance.h"

namespace rdv::conformance {
namespace {

template <typename T>
Backend MakeBackend(const char* name) {
  return Backend{name, [] { return std::make_unique<T>(); },
                 [](Rendezvous& r) { return static_cast<T&>(r).CountPending().waiters; }};
}

INSTANTIATE_TEST_SUITE_P(AllLocalBackends, RendezvousConformanceTest,
                         ::testing::Values(MakeBackend<LocalRendezvous>("local"),
                                           MakeBackend<IntraProcessRendezvous>("intra_process")),
                         BackendName);

}  // namespace
}  // namespace rdv::conformance
