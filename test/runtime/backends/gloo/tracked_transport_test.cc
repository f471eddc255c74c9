// The mechanism PeerWatchdog relies on, made deterministic: a receive that no peer will ever
// satisfy is blocked in waitRecv, and BufferRegistry::FailAll must wake it with the given error
// long before the context's timeout. (gloo_peer_kill_test covers detection end to end.)
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
                                         std::shared_ptr<BufferRegistry> registry) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = CreateTrackedDevice(attr, std::move(registry));
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, 2);
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

}  // namespace
}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
