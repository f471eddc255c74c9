#include "runtime/core/fusion_planner.h"

#include <utility>

namespace dadt {
namespace core {
namespace {

bool Compatible(const Response& a, const Response& b) {
  return a.type == Response::Type::kAllreduce && b.type == Response::Type::kAllreduce &&
         a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.device == b.device &&
         a.process_set_id == b.process_set_id;
}

void Append(Response& bucket, Response& r) {
  for (size_t i = 0; i < r.names.size(); ++i) {
    bucket.names.push_back(std::move(r.names[i]));
    bucket.cache_slots.push_back(r.cache_slots.empty() ? -1 : r.cache_slots[i]);
    bucket.cache_generations.push_back(r.cache_generations.empty() ? 0 : r.cache_generations[i]);
  }
  bucket.sizes.insert(bucket.sizes.end(), r.sizes.begin(), r.sizes.end());
  bucket.total_bytes += r.total_bytes;
}

}  // namespace

std::vector<Response> PlanFusion(std::vector<Response> ready, int64_t threshold_bytes) {
  std::vector<Response> out;
  out.reserve(ready.size());
  // Index into `out` of the open bucket of each compatibility class; scanning the (few) open
  // buckets is cheaper than hashing the key.
  std::vector<size_t> open;
  for (Response& r : ready) {
    if (r.type != Response::Type::kAllreduce || r.eager || threshold_bytes <= 0 ||
        r.total_bytes > threshold_bytes) {
      out.push_back(std::move(r));
      continue;
    }
    bool placed = false;
    for (size_t& idx : open) {
      Response& bucket = out[idx];
      if (!Compatible(bucket, r)) continue;
      if (bucket.total_bytes + r.total_bytes <= threshold_bytes) {
        Append(bucket, r);
        placed = true;
      } else {
        out.push_back(std::move(r));  // the full bucket closes; this one opens the next
        idx = out.size() - 1;
        placed = true;
      }
      break;
    }
    if (!placed) {
      out.push_back(std::move(r));
      open.push_back(out.size() - 1);
    }
  }
  return out;
}

}  // namespace core
}  // namespace dadt
