// The conformance cases (the ABI's contract), run against every transport
// plugin.
#include "plugin/transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/notification.h"
#include "gtest/gtest.h"
#include "tests/plugin/transport_conformance.h"
#include "tests/test_util.h"

namespace rdv::plugin::conformance {
namespace {

// Moves `length` bytes from `source` (in `from`) to `destination` (in `to`)
// with get (or put), through an endpoint of `to` (or `from`).
absl::Status Move(Transport& from, TransportMemory& source, Transport& to,
                  TransportMemory& destination, size_t length, bool put) {
  Transport& actor = put ? from : to;
  Transport& peer = put ? to : from;
  auto endpoint = actor.Connect(*peer.LocalAddress());
  if (!endpoint.ok()) return endpoint.status();
  Notification done;
  absl::Status status;
  auto on_done = [&](absl::Status s) {
    status = s;
    done.Notify();
  };
  if (put) {
    actor.Put(**endpoint, source.address(), source,
              reinterpret_cast<uint64_t>(destination.address()), destination.remote_key(),
              length, on_done);
  } else {
    actor.Get(**endpoint, destination.address(), destination,
              reinterpret_cast<uint64_t>(source.address()), source.remote_key(), length, on_done);
  }
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return absl::DeadlineExceededError("the transfer did not complete in 60 s");
  }
  return status;
}

void Fill(TransportMemory& memory, int seed) {
  auto* bytes = static_cast<unsigned char*>(memory.address());
  for (size_t i = 0; i < memory.length(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + seed);
}

// A get of `length` bytes from memory of context a into memory of context
// b, through an endpoint of b: what the cases that post one need.
struct GetBetween {
  std::unique_ptr<TransportMemory> source;       // in a
  std::unique_ptr<TransportMemory> destination;  // in b
  std::unique_ptr<TransportEndpoint> endpoint;   // b to a
  size_t length = 0;

  void Post(const Transport& b, TransportDone done) const {
    b.Get(*endpoint, destination->address(), *destination,
          reinterpret_cast<uint64_t>(source->address()), source->remote_key(), length,
          std::move(done));
  }
};

absl::StatusOr<GetBetween> PrepareGet(const Transport& a, const Transport& b, size_t length) {
  GetBetween get;
  get.length = length;
  RDV_ASSIGN_OR_RETURN(get.source, a.Allocate(length));
  RDV_ASSIGN_OR_RETURN(get.destination, b.Allocate(length));
  RDV_ASSIGN_OR_RETURN(const std::string address, a.LocalAddress());
  RDV_ASSIGN_OR_RETURN(get.endpoint, b.Connect(address));
  return get;
}

TEST_P(TransportConformanceTest, LoadsAndDescribesItself) {
  RDV_LOAD_OR_SKIP(transport, GetParam());
  EXPECT_EQ(transport->name(), PluginOf(GetParam()));
  EXPECT_FALSE(transport->description().empty());
  auto address = transport->LocalAddress();
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_FALSE(address->empty());
}

// Fresh contexts per direction: each test moves bytes one way.
void MovesBytesBetweenTwoContexts(const std::shared_ptr<Transport>& a,
                                  const std::shared_ptr<Transport>& b, bool put) {
  // Several chunks and an odd tail.
  const size_t length = (size_t{3} << 20) + 123;
  auto source = a->Allocate(length);
  auto destination = b->Allocate(length);
  ASSERT_TRUE(source.ok() && destination.ok());
  Fill(**source, 1);
  std::memset((*destination)->address(), 0, length);
  const absl::Status status = Move(*a, **source, *b, **destination, length, put);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::memcmp((*destination)->address(), (*source)->address(), length), 0) << (put ? "put" : "get");
}

TEST_P(TransportConformanceTest, GetMovesBytesBetweenTwoContexts) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  MovesBytesBetweenTwoContexts(a, b, /*put=*/false);
}

// Each move makes its own endpoint, in alternating directions: an endpoint
// closed between the same two contexts must not spoil the next one (UCX
// lost puts silently after a forced close).
TEST_P(TransportConformanceTest, EndpointsComeAndGoBetweenTheSameContexts) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  for (const bool put : {false, true, false, true}) {
    MovesBytesBetweenTwoContexts(a, b, put);
    if (HasFailure()) return;
  }
}

TEST_P(TransportConformanceTest, PutMovesBytesBetweenTwoContexts) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  MovesBytesBetweenTwoContexts(a, b, /*put=*/true);
}

// A get and a put that reach past the region a key covers fail (refused
// before they start, or by the NIC), crash nobody, and a new endpoint
// moves the next transfer.
TEST_P(TransportConformanceTest, TransfersPastTheKeysRegionFail) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  const size_t length = 64 << 10;
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, length);
  ASSERT_TRUE(get.ok()) << get.status();
  const uint64_t past = reinterpret_cast<uint64_t>(get->source->address()) + 4096;
  Completion got;
  b->Get(*get->endpoint, get->destination->address(), *get->destination, past,
         get->source->remote_key(), length, got.Callback());
  ASSERT_TRUE(got.Wait());
  EXPECT_FALSE(got.status.ok()) << "a get past the key's region";
  Completion put;
  b->Put(*get->endpoint, get->destination->address(), *get->destination, past,
         get->source->remote_key(), length, put.Callback());
  ASSERT_TRUE(put.Wait());
  EXPECT_FALSE(put.status.ok()) << "a put past the key's region";

  absl::StatusOr<std::string> address = a->LocalAddress();
  ASSERT_TRUE(address.ok()) << address.status();
  absl::StatusOr<std::unique_ptr<TransportEndpoint>> fresh = b->Connect(*address);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  get->endpoint = *std::move(fresh);
  Fill(*get->source, 3);
  Completion again;
  get->Post(*b, again.Callback());
  ASSERT_TRUE(again.Wait());
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(std::memcmp(get->destination->address(), get->source->address(), length), 0);
}

// UCX's allocation (memory `mapped`) freed before a peer ever mapped it:
// a get through its key fails, and crashes nobody (UCX 1.13 crashed the
// peer when the allocation was posix's; the plugin allocates sysv's).
TEST(UcxMappedMemoryTest, AGetThroughTheKeyOfFreedMemoryFailsWithoutACrash) {
  std::shared_ptr<Transport> a = LoadOrSkip("ucx:memory=mapped");
  std::shared_ptr<Transport> b = LoadOrSkip("ucx:memory=mapped", /*peer=*/true);
  if (a == nullptr || b == nullptr) GTEST_SKIP() << "the ucx plugin is not built here";
  const size_t length = size_t{1} << 20;  // the plugin gives segments from 256 KiB
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, length);
  ASSERT_TRUE(get.ok()) << get.status();
  Completion proven;
  get->Post(*b, proven.Callback());
  ASSERT_TRUE(proven.Wait());
  ASSERT_TRUE(proven.status.ok()) << proven.status;

  absl::StatusOr<std::unique_ptr<TransportMemory>> freed = a->Allocate(length);
  ASSERT_TRUE(freed.ok()) << freed.status();
  const std::string key = (*freed)->remote_key();
  const uint64_t address = reinterpret_cast<uint64_t>((*freed)->address());
  freed->reset();
  Completion stale;
  b->Get(*get->endpoint, get->destination->address(), *get->destination, address, key, length,
         stale.Callback());
  ASSERT_TRUE(stale.Wait());
  EXPECT_FALSE(stale.status.ok()) << "a get from memory its owner freed";
}

// Memory `mapped` is System V segments whose pages are mapped when they are
// allocated, and a peer's attachment maps all of them at once: touched one
// by one, 4 KiB pages fault one at a time, which cost more than the copies
// on these machines (docs/configuration.md, "Shared-memory segments").
TEST(UcxMappedMemoryTest, ASegmentComesWithItsPagesMapped) {
  std::shared_ptr<Transport> a = LoadOrSkip("ucx:memory=mapped");
  if (a == nullptr) GTEST_SKIP() << "the ucx plugin is not built here";
  const size_t length = size_t{4} << 20;
  absl::StatusOr<std::unique_ptr<TransportMemory>> memory = a->Allocate(length);
  ASSERT_TRUE(memory.ok()) << memory.status();
  const std::optional<testing::Mapping> mapping = testing::MappingAt((*memory)->address());
  ASSERT_TRUE(mapping.has_value());
  EXPECT_NE(mapping->inode, 0) << "not a System V segment";
  EXPECT_GE(mapping->rss_bytes, length);
}

TEST(UcxMappedMemoryTest, AGetThroughAPeersSegmentMapsAllOfIt) {
  std::shared_ptr<Transport> a = LoadOrSkip("ucx:memory=mapped");
  std::shared_ptr<Transport> b = LoadOrSkip("ucx:memory=mapped", /*peer=*/true);
  if (a == nullptr || b == nullptr) GTEST_SKIP() << "the ucx plugin is not built here";
  const size_t length = size_t{4} << 20;
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, length);
  ASSERT_TRUE(get.ok()) << get.status();
  const std::optional<testing::Mapping> source = testing::MappingAt(get->source->address());
  ASSERT_TRUE(source.has_value());
  // The first get proves the endpoint's wireup; the second copies through
  // b's attachment of a's segment. Each reads one page.
  for (int round = 0; round < 2; ++round) {
    Completion got;
    b->Get(*get->endpoint, get->destination->address(), *get->destination,
           reinterpret_cast<uint64_t>(get->source->address()), get->source->remote_key(), 4096,
           got.Callback());
    ASSERT_TRUE(got.Wait());
    ASSERT_TRUE(got.status.ok()) << got.status;
  }
  size_t attached_rss = 0;
  for (const testing::Mapping& mapping : testing::Mappings()) {
    if (mapping.inode == source->inode && mapping.begin != source->begin) {
      attached_rss = std::max(attached_rss, mapping.rss_bytes);
    }
  }
  EXPECT_GE(attached_rss, length) << "of segment " << source->inode;
}

// Gets and puts, one after the other, through one endpoint: the later ones
// find its wireup done (UCX with memory `mapped` then copies through the
// peer's System V segment, not UCX).
TEST_P(TransportConformanceTest, RepeatedTransfersOnOneEndpointMoveTheirBytes) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  const size_t length = (size_t{1} << 20) + 5;
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, length);
  ASSERT_TRUE(get.ok()) << get.status();
  for (int round = 0; round < 4; ++round) {
    Fill(*get->source, round);
    std::memset(get->destination->address(), 0, length);
    Completion got;
    get->Post(*b, got.Callback());
    ASSERT_TRUE(got.Wait()) << "get " << round;
    ASSERT_TRUE(got.status.ok()) << got.status;
    EXPECT_NE(got.thread, std::this_thread::get_id()) << "get " << round;
    EXPECT_EQ(std::memcmp(get->destination->address(), get->source->address(), length), 0)
        << "get " << round;

    Fill(*get->destination, round + 100);
    Completion put;
    b->Put(*get->endpoint, get->destination->address(), *get->destination,
           reinterpret_cast<uint64_t>(get->source->address()), get->source->remote_key(), length,
           put.Callback());
    ASSERT_TRUE(put.Wait()) << "put " << round;
    ASSERT_TRUE(put.status.ok()) << put.status;
    EXPECT_NE(put.thread, std::this_thread::get_id()) << "put " << round;
    EXPECT_EQ(std::memcmp(get->source->address(), get->destination->address(), length), 0)
        << "put " << round;
  }
}

TEST_P(TransportConformanceTest, ForgedRemoteKeyIsAnErrorNotACrash) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  auto destination = a->Allocate(4096);
  auto endpoint = a->Connect(*a->LocalAddress());
  ASSERT_TRUE(destination.ok() && endpoint.ok());
  Notification done;
  absl::Status status;
  a->Get(**endpoint, (*destination)->address(), **destination, 0x1000, "not a key", 4096,
         [&](absl::Status s) {
           status = s;
           done.Notify();
         });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

// An address made up, or a real one cut short, is refused before the
// transport library parses it (UCX aborts the process on a garbage one).
TEST_P(TransportConformanceTest, ForgedAddressIsAnErrorNotACrash) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  const std::string address = *a->LocalAddress();
  for (const std::string& forged :
       {std::string(), std::string("garbage"), std::string(address.size(), '\xff'),
        address.substr(0, address.size() - 1), address + "x"}) {
    auto endpoint = a->Connect(forged);
    EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kInvalidArgument)
        << forged.size() << " bytes: " << endpoint.status();
  }
}

// An aborted endpoint ends what is in flight (once each, with its result
// or CANCELLED), refuses more with UNAVAILABLE, and a new endpoint between
// the same two contexts works.
TEST_P(TransportConformanceTest, AbortedEndpointEndsItsTransfersAndRefusesMore) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, size_t{16} << 20);
  ASSERT_TRUE(get.ok()) << get.status();
  Notification done;
  std::atomic<int> calls{0};
  absl::Status status;
  get->Post(*b, [&](absl::Status s) {
    status = s;
    if (calls.fetch_add(1) == 0) done.Notify();
  });
  get->endpoint->Abort();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok() || absl::IsCancelled(status)) << status;
  Notification refused;
  absl::Status after;
  get->Post(*b, [&](absl::Status s) {
    after = s;
    refused.Notify();
  });
  ASSERT_TRUE(refused.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable) << after;
  get->endpoint.reset();
  EXPECT_EQ(calls.load(), 1);
  MovesBytesBetweenTwoContexts(a, b, /*put=*/false);
}

// A tagged receive no send matched ends with CANCELLED when cancelled; a
// tag nothing waits under is NOT_FOUND.
TEST_P(TransportConformanceTest, CancelledRecvEndsWithCancelled) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  if (!(a->supported_ops() & RDV_TRANSPORT_OP_TAG)) {
    EXPECT_EQ(a->CancelRecv(7).code(), absl::StatusCode::kNotFound);
    GTEST_SKIP() << GetParam() << " offers no tagged messages";
  }
  auto destination = a->Allocate(4096);
  ASSERT_TRUE(destination.ok());
  Notification done;
  absl::Status status;
  a->Recv((*destination)->address(), 4096, 7, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  ASSERT_TRUE(a->CancelRecv(7).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_EQ(a->CancelRecv(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->CancelRecv(8).code(), absl::StatusCode::kNotFound);
}

// The ABI's threading contract: a posted operation completes on the
// plugin's progress thread, never on the thread that posted it; an
// operation the plugin refuses (an error return) gets no callback from the
// plugin, so the caller's one report of it is the only one.
TEST_P(TransportConformanceTest, CallbacksRunOnTheProgressThreadAndARefusalHasNone) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, 4096);
  ASSERT_TRUE(get.ok()) << get.status();
  Completion posted;
  get->Post(*b, posted.Callback());
  ASSERT_TRUE(posted.Wait());
  ASSERT_TRUE(posted.status.ok()) << posted.status;
  EXPECT_NE(posted.thread, std::this_thread::get_id());

  get->endpoint->Abort();
  Completion refused;
  get->Post(*b, refused.Callback());
  ASSERT_TRUE(refused.Wait());
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnavailable) << refused.status;
  get->endpoint.reset();
  a.reset();
  b.reset();  // finalize: anything the plugin still owed has run by now
  EXPECT_EQ(posted.calls.load(), 1);
  EXPECT_EQ(refused.calls.load(), 1) << "a refused post must not also complete";
}

// Disconnecting an endpoint with a transfer in flight ends that transfer
// once, with its result or CANCELLED, and leaves the contexts usable.
TEST_P(TransportConformanceTest, DisconnectWithATransferInFlightEndsItOnce) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  absl::StatusOr<GetBetween> get = PrepareGet(*a, *b, size_t{16} << 20);
  ASSERT_TRUE(get.ok()) << get.status();
  Completion in_flight;
  get->Post(*b, in_flight.Callback());
  get->endpoint.reset();
  ASSERT_TRUE(in_flight.Wait()) << "a disconnected endpoint left its transfer waiting";
  EXPECT_TRUE(in_flight.status.ok() || absl::IsCancelled(in_flight.status)) << in_flight.status;
  MovesBytesBetweenTwoContexts(a, b, /*put=*/false);
  EXPECT_EQ(in_flight.calls.load(), 1);
}

// A tagged send meets the receive posted under its tag, whichever comes
// first; a transport without tagged messages refuses the send at once.
TEST_P(TransportConformanceTest, TaggedSendMeetsItsRecv) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  const size_t length = (size_t{1} << 20) + 5;
  auto source = a->Allocate(length);
  auto destination = b->Allocate(length);
  auto endpoint = a->Connect(*b->LocalAddress());
  ASSERT_TRUE(source.ok() && destination.ok() && endpoint.ok());
  Fill(**source, 3);
  if (!(a->supported_ops() & RDV_TRANSPORT_OP_TAG)) {
    Completion refused;
    a->Send(**endpoint, (*source)->address(), length, 11, refused.Callback());
    ASSERT_TRUE(refused.Wait());
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnimplemented) << refused.status;
    EXPECT_EQ(refused.thread, std::this_thread::get_id());
    GTEST_SKIP() << GetParam() << " offers no tagged messages";
  }
  for (const bool receive_first : {true, false}) {
    const uint64_t tag = receive_first ? 11 : 12;
    std::memset((*destination)->address(), 0, length);
    Completion sent;
    Completion received;
    if (receive_first) b->Recv((*destination)->address(), length, tag, received.Callback());
    a->Send(**endpoint, (*source)->address(), length, tag, sent.Callback());
    if (!receive_first) b->Recv((*destination)->address(), length, tag, received.Callback());
    ASSERT_TRUE(sent.Wait() && received.Wait()) << "receive first: " << receive_first;
    ASSERT_TRUE(sent.status.ok()) << sent.status;
    ASSERT_TRUE(received.status.ok()) << received.status;
    EXPECT_EQ(std::memcmp((*destination)->address(), (*source)->address(), length), 0)
        << "receive first: " << receive_first;
    EXPECT_EQ(sent.calls.load() + received.calls.load(), 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportConformanceTest,
                         ::testing::Values("ucx", "ucx:memory=mapped", "ucx_abi_v2", "verbs"),
                         ParameterName);

// A genuine key used beyond its region: the NIC refuses the READ, the QP
// goes to the error state, the transfer fails with the completion's status,
// and a new endpoint (a new QP) moves the next transfer.
class VerbsTransportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VerbsTransportTest, RemoteAccessErrorFailsTheTransferAndANewEndpointRecovers) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  auto source = a->Allocate(4096);
  auto destination = b->Allocate(8192);
  ASSERT_TRUE(source.ok() && destination.ok());
  Fill(**source, 3);
  auto endpoint = b->Connect(*a->LocalAddress());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  Notification done;
  absl::Status status;
  b->Get(**endpoint, (*destination)->address(), **destination,
         reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), 8192,
         [&](absl::Status s) {
           status = s;
           done.Notify();
         });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("remote access error"), std::string::npos) << status;

  // The old QP is out of service and says so at once.
  Notification refused;
  b->Get(**endpoint, (*destination)->address(), **destination,
         reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), 4096,
         [&](absl::Status s) {
           status = s;
           refused.Notify();
         });
  ASSERT_TRUE(refused.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;

  ASSERT_TRUE(Move(*a, **source, *b, **destination, 4096, /*put=*/false).ok());
  EXPECT_EQ(std::memcmp((*destination)->address(), (*source)->address(), 4096), 0);
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsTransportTest, ::testing::Values("verbs"));

}  // namespace
}  // namespace rdv::plugin::conformance
