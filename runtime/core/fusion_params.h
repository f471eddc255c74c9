// FusionParamsMailbox: the fusion knobs (threshold bytes, cycle time) set by hand while a job
// runs. API threads post them; rank 0's loop thread takes them before its next negotiation round
// and hands them to its Coordinator, so the coordinator itself stays single-threaded.
//
//   mailbox.Post(64 << 20, -1);                 // any thread; a negative value keeps that knob
//   if (auto p = mailbox.Take()) { ... }         // loop thread
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

namespace dadt {
namespace core {

class FusionParamsMailbox {
 public:
  struct Params {
    int64_t fusion_threshold_bytes = -1;  // < 0: unchanged
    double cycle_time_ms = -1;            // < 0: unchanged
  };

  // Merges into what is waiting (a later value for the same knob wins).
  void Post(int64_t fusion_threshold_bytes, double cycle_time_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    Params& p = pending_ ? *pending_ : pending_.emplace();
    if (fusion_threshold_bytes >= 0) p.fusion_threshold_bytes = fusion_threshold_bytes;
    if (cycle_time_ms >= 0) p.cycle_time_ms = cycle_time_ms;
  }

  // What was posted since the last Take, if anything.
  std::optional<Params> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<Params> p;
    p.swap(pending_);
    return p;
  }

 private:
  std::mutex mu_;
  std::optional<Params> pending_;
};

}  // namespace core
}  // namespace dadt
