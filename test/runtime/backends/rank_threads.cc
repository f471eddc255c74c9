#include "test/runtime/backends/rank_threads.h"

#include <atomic>
#include <climits>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace testutil {

namespace {

std::map<std::string, RankRunner*>& Runners() {
  static auto* runners = new std::map<std::string, RankRunner*>();
  return *runners;
}

RankRunner* RunnerFor(const std::string& backend) {
  auto it = Runners().find(backend);
  return it == Runners().end() ? nullptr : it->second;
}

std::atomic<int>& ThreadCounter() {
  static std::atomic<int> counter{0};
  return counter;
}

}  // namespace

void SetRankRunner(const std::string& backend, RankRunner* runner) {
  if (runner) {
    Runners()[backend] = runner;
  } else {
    Runners().erase(backend);
  }
}

int MaxRanks(const std::string& backend) {
  RankRunner* runner = RunnerFor(backend);
  return runner ? runner->MaxRanks() : INT_MAX;
}

std::atomic<int>& SharedCounter(const std::string& backend) {
  RankRunner* runner = RunnerFor(backend);
  return runner ? runner->SharedCounter() : ThreadCounter();
}

std::string UniqueStorePrefix() {
  static std::atomic<int> next{0};
  return "test/" + std::to_string(next++) + "/";
}

void RunRanks(const std::string& backend, int size, const RankBody& body,
              std::chrono::milliseconds timeout, const OptionsTweak& tweak) {
  if (RankRunner* runner = RunnerFor(backend)) return runner->Run(backend, size, body, timeout);
  ThreadCounter() = 0;
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
    if (tweak) tweak(options);
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
