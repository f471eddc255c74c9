// InMemoryKeyValueStore: a thread-safe KeyValueStore for tests that run ranks as threads.
//
// Stands in for dadtrun's rendezvous server when every rank lives in one process:
//
//   InMemoryKeyValueStore store;
//   options.store = &store;  // shared by every rank's backend
//
// Get() blocks on a condition variable until the key is set or the timeout passes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "runtime/common/kv_store.h"

namespace dadt {
namespace testutil {

class InMemoryKeyValueStore : public KeyValueStore {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = value;
    }
    cv_.notify_all();
    return Status::OK();
  }

  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return TimeoutError("timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for key '" + key + "'");
    }
    return values_[key];
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace testutil
}  // namespace dadt
