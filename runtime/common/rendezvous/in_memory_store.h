// InMemoryStore: a KeyValueStore inside one process, for single-process jobs and for tests that run
// ranks as threads.
//
// Same semantics as the rendezvous server: Get blocks until the key is set or the timeout passes,
// Add treats values as decimal int64 counters. Thread-safe (one mutex and a condition variable).
//
//   InMemoryStore store;
//   std::thread t([&] { (void)store.Set("coordinator/addr", "10.0.0.1:1234"); });
//   StatusOr<std::string> addr = store.Get("coordinator/addr", std::chrono::seconds(5));
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"

namespace dadt {
namespace rendezvous {

class InMemoryStore : public KeyValueStore {
 public:
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace rendezvous
}  // namespace dadt
