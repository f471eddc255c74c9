// The mechanism PeerWatchdog relies on, made deterministic: a receive that no peer will ever
// satisfy is blocked in waitRecv, and BufferRegistry::FailAll must wake it with the given error
// long before the context's timeout; BufferRegistry::FailPeer wakes only the waits that involve
// the failed rank, so a peer that exits after its part of a collective does not fail a collective
// that waits on others. (gloo_peer_kill_test covers detection end to end.)
#include "runtime/backends/gloo/tracked_transport.h"

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>

#include "gtest/gtest.h"
#include "runtime/backends/gloo/store_adapter.h"
#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<::gloo::Context> Connect(int rank, KeyValueStore* store,
                                         std::shared_ptr<BufferRegistry> registry, int size = 2) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = CreateTrackedDevice(attr, std::move(registry));
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  context->setTimeout(milliseconds(30000));
  StoreAdapter adapter(store, "tracked/", milliseconds(30000));
  context->connectFullMesh(adapter, device);
  return context;
}

TEST(TrackedTransportTest, FailAllWakesABlockedWaitWithTheGivenError) {
  testutil::InMemoryKeyValueStore store;
  auto registry0 = std::make_shared<BufferRegistry>();
  auto registry1 = std::make_shared<BufferRegistry>();
  auto peer = std::async(std::launch::async, [&] { return Connect(1, &store, registry1); });
  auto context = Connect(0, &store, registry0);
  auto keep_peer_alive = peer.get();

  int value = 0;
  auto buffer = context->createUnboundBuffer(&value, sizeof(value));
  buffer->recv(1, /*slot=*/42);  // rank 1 never sends
  std::thread failer([&] {
    std::this_thread::sleep_for(milliseconds(100));
    registry0->FailAll(std::make_exception_ptr(::gloo::IoException("injected failure")));
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    buffer->waitRecv(milliseconds(30000));
    ADD_FAILURE() << "waitRecv returned instead of throwing";
  } catch (const ::gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
  failer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // Buffers created after the failure fail at once.
  auto later = context->createUnboundBuffer(&value, sizeof(value));
  later->recv(1, /*slot=*/43);
  EXPECT_THROW(later->waitRecv(milliseconds(30000)), ::gloo::IoException);
}

TEST(TrackedTransportTest, FailPeerWakesOnlyTheWaitsOnThatPeer) {
  testutil::InMemoryKeyValueStore store;
  auto registry0 = std::make_shared<BufferRegistry>();
  auto registry1 = std::make_shared<BufferRegistry>();
  auto registry2 = std::make_shared<BufferRegistry>();
  auto peer1 = std::async(std::launch::async, [&] { return Connect(1, &store, registry1, 3); });
  auto peer2 = std::async(std::launch::async, [&] { return Connect(2, &store, registry2, 3); });
  auto context = Connect(0, &store, registry0, 3);
  auto context1 = peer1.get();
  auto keep_peer2_alive = peer2.get();

  int from1 = 0, from2 = 0;
  auto on1 = context->createUnboundBuffer(&from1, sizeof(from1));
  auto on2 = context->createUnboundBuffer(&from2, sizeof(from2));
  on1->recv(1, /*slot=*/7);
  on2->recv(2, /*slot=*/8);  // rank 2 never sends: its connection is the one that "failed"
  registry0->FailPeer(2, std::make_exception_ptr(::gloo::IoException("rank 2 went away")));
  try {
    on2->waitRecv(milliseconds(30000));
    ADD_FAILURE() << "the wait on rank 2 returned instead of throwing";
  } catch (const ::gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 went away"), std::string::npos) << e.what();
  }

  // The wait on rank 1 is untouched: rank 1 sends, and it completes with the value.
  int value = 1234;
  auto sender = context1->createUnboundBuffer(&value, sizeof(value));
  sender->send(0, /*slot=*/7);
  sender->waitSend(milliseconds(30000));
  int rank = -1;
  EXPECT_TRUE(on1->waitRecv(&rank, milliseconds(30000)));
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(from1, 1234);

  // Later buffers: one that talks to rank 2 fails at once; one that talks to rank 1 works.
  auto later2 = context->createUnboundBuffer(&from2, sizeof(from2));
  later2->recv(2, /*slot=*/9);
  EXPECT_THROW(later2->waitRecv(milliseconds(30000)), ::gloo::IoException);
  auto later1 = context->createUnboundBuffer(&from1, sizeof(from1));
  later1->recv(1, /*slot=*/10);
  value = 5678;
  sender->send(0, /*slot=*/10);
  sender->waitSend(milliseconds(30000));
  EXPECT_TRUE(later1->waitRecv(milliseconds(30000)));
  EXPECT_EQ(from1, 5678);
}

}  // namespace
}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
