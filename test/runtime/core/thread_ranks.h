// Ranks as threads, each with a whole Runtime of its own: the real TCP control star over loopback,
// the real Gloo data plane, and one in-memory rendezvous store that every rank's Runtime owns a
// view of (SharedStore). For the tests that drive the runtime end to end in one process.
//
//   RunThreadRanks(4, [](RuntimeOptions& o) { o.fusion_threshold_bytes = 0; },
//                  [](int rank, Runtime& rt) { ... });   // then each rank's Shutdown()
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/rendezvous/in_memory_store.h"
#include "runtime/core/runtime.h"

namespace dadt {
namespace core {
namespace testing_threads {

// Lets every rank's Runtime own "its" store while all share one map.
class SharedStore : public KeyValueStore {
 public:
  explicit SharedStore(KeyValueStore* s) : s_(s) {}
  Status Set(const std::string& k, const std::string& v) override { return s_->Set(k, v); }
  StatusOr<std::string> Get(const std::string& k, std::chrono::milliseconds t) override {
    return s_->Get(k, t);
  }

 private:
  KeyValueStore* s_;
};

// Runs body(rank, runtime) on `size` threads, each with its own Runtime (all ranks on this host,
// 20 s start and operation time-outs, `configure` for the rest), then shuts each down and runs
// `after_shutdown` on it.
inline void RunThreadRanks(int size, const std::function<void(RuntimeOptions&)>& configure,
                           const std::function<void(int, Runtime&)>& body,
                           const std::function<void(int, Runtime&)>& after_shutdown = nullptr) {
  rendezvous::InMemoryStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      RuntimeOptions o;
      o.rank = o.local_rank = r;
      o.size = o.local_size = size;
      o.secret = "s3cret";
      o.start_timeout = std::chrono::seconds(20);
      o.op_timeout = std::chrono::seconds(20);
      if (configure) configure(o);
      auto rt = Runtime::Start(o, std::make_unique<SharedStore>(&store));
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      body(r, **rt);
      (*rt)->Shutdown();
      if (after_shutdown) after_shutdown(r, **rt);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace testing_threads
}  // namespace core
}  // namespace dadt
