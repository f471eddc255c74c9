#include "runtime/common/rendezvous/in_memory_store.h"

#include "runtime/common/rendezvous/protocol.h"

namespace dadt {
namespace rendezvous {

Status InMemoryStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
  return Status::OK();
}

StatusOr<std::string> InMemoryStore::Get(const std::string& key,
                                         std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = values_.end();
  bool found = changed_.wait_for(lock, timeout, [&] {
    it = values_.find(key);
    return it != values_.end();
  });
  if (!found) {
    return TimeoutError("timed out after " + std::to_string(timeout.count()) +
                        " ms waiting for key '" + key + "'");
  }
  return it->second;
}

StatusOr<int64_t> InMemoryStore::Add(const std::string& key, int64_t delta) {
  std::string result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    DADT_RETURN_IF_ERROR(
        ApplyAdd(it == values_.end() ? nullptr : &it->second, std::to_string(delta), &result));
    values_[key] = result;
  }
  changed_.notify_all();
  return static_cast<int64_t>(std::stoll(result));
}

}  // namespace rendezvous
}  // namespace dadt
