#include "test/runtime/backends/rank_threads.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace testutil {

std::string UniqueStorePrefix() {
  static std::atomic<int> next{0};
  return "test/" + std::to_string(next++) + "/";
}

void RunRanks(const std::string& backend, int size, const RankBody& body,
              std::chrono::milliseconds timeout) {
  InMemoryKeyValueStore store;
  const std::string prefix = UniqueStorePrefix();
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;

  auto rank_main = [&](int rank) {
    backends::BackendOptions options;
    options.rank = rank;
    options.size = size;
    options.local_rank = rank;
    options.local_size = size;
    options.timeout = timeout;
    options.store = &store;
    options.store_prefix = prefix;
    auto created = backends::BackendRegistry::Create(backend, options);
    if (created.ok()) {
      body(rank, **created);
    } else {
      ADD_FAILURE() << "rank " << rank << ": creating backend '" << backend
                    << "' failed: " << created.status().ToString();
    }
    std::unique_lock<std::mutex> lock(mu);
    ++finished;
    cv.notify_all();
    cv.wait(lock, [&] { return finished == size; });
    // The Backend (inside `created`) is destroyed here, after every rank is done.
  };

  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
}

}  // namespace testutil
}  // namespace dadt
