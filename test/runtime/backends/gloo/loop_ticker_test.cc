// LoopTicker (runtime/backends/gloo/loop_ticker.h): idle until started, so a live context's
// traffic never calls it; once started it turns the transport loop on its own, until stopped;
// and tearing a connected pair of contexts down through it, or dropping it while its device lives
// on, leaves no descriptor or thread behind.
#include "runtime/backends/gloo/loop_ticker.h"

#include <dirent.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <utility>

#include <gloo/rendezvous/context.h>

#include "gtest/gtest.h"
#include "runtime/backends/gloo/store_adapter.h"
#include "runtime/backends/gloo/tracked_transport.h"
#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
namespace {

using std::chrono::milliseconds;

int Entries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}
int OpenDescriptors() { return Entries("/proc/self/fd"); }
int Threads() { return Entries("/proc/self/task"); }

std::shared_ptr<::gloo::transport::Device> Device() {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return CreateTrackedDevice(attr, std::make_shared<BufferRegistry>());
}

struct Rank {
  std::shared_ptr<::gloo::Context> context;
  std::unique_ptr<LoopTicker> ticker;
};

Rank Connect(int rank, KeyValueStore* store) {
  Rank r;
  auto device = Device();
  r.ticker = LoopTicker::Attach(device);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, 2);
  context->setTimeout(milliseconds(30000));
  StoreAdapter adapter(store, "ticker/", milliseconds(30000));
  context->connectFullMesh(adapter, device);
  r.context = std::move(context);
  return r;
}

template <typename Predicate>
bool Eventually(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  return done();
}

TEST(LoopTickerTest, IdleUntilStartedThenTurnsTheLoopAndTeardownLeavesNothingBehind) {
  // ThreadSanitizer starts a background thread of its own at the process's first
  // pthread_create: create one first, so that the count below sees only what the test leaves.
  std::thread([] {}).join();
  const int fds_before = OpenDescriptors();
  const int threads_before = Threads();
  {
    testutil::InMemoryKeyValueStore store;
    auto peer = std::async(std::launch::async, [&] { return Connect(1, &store); });
    Rank self = Connect(0, &store);
    Rank other = peer.get();
    ASSERT_NE(self.ticker, nullptr);
    ASSERT_NE(other.ticker, nullptr);

    // A message each way: the pairs' traffic does not involve the ticker.
    int out = 7, in = 0, back = 0;
    auto send = self.context->createUnboundBuffer(&out, sizeof(out));
    auto recv = other.context->createUnboundBuffer(&in, sizeof(in));
    auto echo = other.context->createUnboundBuffer(&in, sizeof(in));
    auto reply = self.context->createUnboundBuffer(&back, sizeof(back));
    recv->recv(0, /*slot=*/1);
    send->send(1, /*slot=*/1);
    recv->waitRecv(milliseconds(30000));
    send->waitSend(milliseconds(30000));
    reply->recv(1, /*slot=*/2);
    echo->send(0, /*slot=*/2);
    reply->waitRecv(milliseconds(30000));
    echo->waitSend(milliseconds(30000));
    EXPECT_EQ(back, 7);
    EXPECT_EQ(self.ticker->turns(), 0);
    EXPECT_EQ(other.ticker->turns(), 0);

    // Started, the ticker makes the loop turn with no traffic at all; stopped, it is idle again
    // (at most a turn already under way completes), and it can be started again.
    self.ticker->Start();
    EXPECT_TRUE(Eventually([&] { return self.ticker->turns() > 3; })) << self.ticker->turns();
    EXPECT_EQ(other.ticker->turns(), 0);
    // A turn the loop had already begun when Stop() ran may still be counted, however long the
    // loaded machine takes to schedule it; a second one would mean the loop is still spinning.
    self.ticker->Stop();
    const int64_t stopped_at = self.ticker->turns();
    std::this_thread::sleep_for(milliseconds(30));  // three of the loop's own 10 ms turns
    EXPECT_LE(self.ticker->turns(), stopped_at + 1);
    self.ticker->Start();
    EXPECT_TRUE(Eventually([&] { return self.ticker->turns() > stopped_at + 1; }));

    // The teardown the backend does: started ticker, context (pairs, device, loop), ticker.
    send.reset();
    recv.reset();
    echo.reset();
    reply.reset();
    other.ticker->Start();
    for (Rank* r : {&self, &other}) {
      r->context.reset();
      r->ticker.reset();
    }
  }
  EXPECT_EQ(OpenDescriptors(), fds_before);
  // A joined thread's /proc entry can outlive pthread_join by a moment.
  EXPECT_TRUE(Eventually([&] { return Threads() == threads_before; }))
      << Threads() << " threads, " << threads_before << " before";
}

// Dropped while its device lives on (a failed connect): it unregisters from the loop first, so
// the loop never calls a destroyed handler, and the device stays usable.
TEST(LoopTickerTest, DroppedBeforeItsDeviceUnregistersFromTheLoop) {
  const int fds_before = OpenDescriptors();
  {
    auto device = Device();
    auto ticker = LoopTicker::Attach(device);
    ASSERT_NE(ticker, nullptr);
    ticker->Start();
    EXPECT_TRUE(Eventually([&] { return ticker->turns() > 0; }));
    ticker.reset();
    auto again = LoopTicker::Attach(device);  // the loop still takes new descriptors
    ASSERT_NE(again, nullptr);
    std::this_thread::sleep_for(milliseconds(30));  // three of the loop's own 10 ms turns
    EXPECT_EQ(again->turns(), 0);
  }
  EXPECT_EQ(OpenDescriptors(), fds_before);
}

TEST(LoopTickerTest, NoDeviceNoTicker) { EXPECT_EQ(LoopTicker::Attach(nullptr), nullptr); }

}  // namespace
}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
