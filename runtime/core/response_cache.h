// ResponseCache: lets a tensor that was negotiated before skip the name exchange.
//
// Protocol (every rank holds a replica; the coordinator's copy is authoritative):
//  1. The first time a cacheable tensor is negotiated, the coordinator assigns it a slot and a
//     generation (Assign) and sends both in the Response; every rank records them (Put) before
//     executing that response, so all replicas change at the same point of the response stream.
//  2. Next time, a rank whose replica holds the same name with the same signature sends only
//     CachedRef{slot, generation} (8 bytes instead of the whole request).
//  3. The coordinator resolves the ref (Resolve). If the slot was reassigned since the rank's
//     replica saw it (the generation differs), Resolve fails and the coordinator asks that rank
//     to resend the full request: refs in flight can never be misread as another tensor.
// When full, Assign reuses the least recently used slot. Capacity 0 disables the cache.
// Not thread-safe: owned by the loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/core/negotiation/message.h"

namespace dadt {
namespace core {

class ResponseCache {
 public:
  explicit ResponseCache(int64_t capacity);

  bool enabled() const { return active_ && !slots_.empty(); }
  // Turns the cache on or off at one point of the response stream on every rank (the autotuner's
  // knob); off forgets every entry, so refs still in flight become stale and are resent.
  void SetActive(bool on);
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }
  int64_t size() const { return static_cast<int64_t>(by_name_.size()); }

  // The ref to send for `req`, if this replica holds the same name with the same signature.
  std::optional<CachedRef> Lookup(const Request& req) const;
  // Coordinator: the cached request for `ref`, or nullptr when the ref is stale. Marks it used.
  const Request* Resolve(const CachedRef& ref);
  // Coordinator: picks a slot for `req` (its current one, a free one, or the LRU victim), bumps
  // the generation, records it and returns the new ref.
  CachedRef Assign(const Request& req);
  // Replica: records an assignment the coordinator made.
  void Put(const CachedRef& ref, const Request& req);

 private:
  struct Slot {
    bool used = false;
    uint32_t generation = 0;
    uint64_t last_use = 0;
    Request request;
  };
  void Store(int32_t slot, uint32_t generation, const Request& req);

  std::vector<Slot> slots_;
  // By tensor: the process set id's 4 bytes, then the name (the same name in two sets is two
  // tensors; the fixed-width prefix keeps the key unambiguous).
  // By tensor: the process set id's 4 bytes, then the name (the same name in two sets is two
  // tensors; the fixed-width prefix keeps the key unambiguous).
  std::unordered_map<std::string, int32_t> by_name_;
  uint64_t clock_ = 0;
  bool active_ = true;
};

}  // namespace core
}  // namespace dadt
