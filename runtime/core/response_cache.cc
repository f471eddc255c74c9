#include "runtime/core/response_cache.h"

#include <cstring>

namespace dadt {
namespace core {
namespace {

std::string TensorKey(const Request& req) {
  std::string key(sizeof(req.process_set_id), '\0');
  std::memcpy(key.data(), &req.process_set_id, sizeof(req.process_set_id));
  return key + req.name;
}

}  // namespace

ResponseCache::ResponseCache(int64_t capacity) : slots_(capacity > 0 ? capacity : 0) {}

void ResponseCache::SetActive(bool on) {
  active_ = on;
  if (on) return;
  for (Slot& s : slots_) s.used = false;  // generations survive, so old refs stay stale
  by_name_.clear();
}

std::optional<CachedRef> ResponseCache::Lookup(const Request& req) const {
  if (!enabled() || !req.Cacheable()) return std::nullopt;
  auto it = by_name_.find(TensorKey(req));
  if (it == by_name_.end()) return std::nullopt;
  const Slot& s = slots_[it->second];
  if (!s.request.SameSignature(req)) return std::nullopt;
  return CachedRef{it->second, s.generation};
}

const Request* ResponseCache::Resolve(const CachedRef& ref) {
  if (!active_ || ref.slot < 0 || ref.slot >= capacity()) return nullptr;
  Slot& s = slots_[ref.slot];
  if (!s.used || s.generation != ref.generation) return nullptr;
  s.last_use = ++clock_;
  return &s.request;
}

CachedRef ResponseCache::Assign(const Request& req) {
  int32_t slot = -1;
  auto it = by_name_.find(TensorKey(req));
  if (it != by_name_.end()) {
    slot = it->second;
  } else {
    uint64_t oldest = UINT64_MAX;
    for (int32_t i = 0; i < capacity(); ++i) {
      if (!slots_[i].used) {
        slot = i;
        break;
      }
      if (slots_[i].last_use < oldest) {
        oldest = slots_[i].last_use;
        slot = i;
      }
    }
  }
  CachedRef ref{slot, slots_[slot].generation + 1};
  Store(ref.slot, ref.generation, req);
  return ref;
}

void ResponseCache::Put(const CachedRef& ref, const Request& req) {
  if (ref.slot < 0 || ref.slot >= capacity()) return;
  Store(ref.slot, ref.generation, req);
}

void ResponseCache::Store(int32_t slot, uint32_t generation, const Request& req) {
  Slot& s = slots_[slot];
  if (s.used) by_name_.erase(TensorKey(s.request));
  auto old = by_name_.find(TensorKey(req));
  if (old != by_name_.end() && old->second != slot) slots_[old->second].used = false;
  s.used = true;
  s.generation = generation;
  s.last_use = ++clock_;
  s.request = req;
  s.request.rank = 0;
  s.request.data.clear();  // payloads travel per call; the cache keeps the signature only
  s.request.eager = false;
  by_name_[TensorKey(req)] = slot;
}

}  // namespace core
}  // namespace dadt
