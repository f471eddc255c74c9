// AutotuneDriver: connects rank 0's loop to the autotuner (autotune/parameter_manager.h).
//
// It watches the allreduces rank 0 executes and cuts them into training steps the way Horovod
// does: a step ends when a tensor name already reduced in the current step comes round again.
// Each step's bytes and wall time go to the ParameterManager, which scores samples in bytes
// reduced per second and proposes the next fusion threshold and cycle time. Only the coordinator
// uses those two knobs (it alone decides what is fused and when it is released), so applying them
// on rank 0 switches the whole job at once, at the same point of the response stream.
// The response cache is switched through the coordinator: the next response list tells every rank
// to turn its cache off or on at the same point of the stream. Hierarchical allreduce is held
// fixed (not implemented yet).
// Runs on rank 0's loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>

#include "autotune/parameter_manager.h"
#include "runtime/common/status.h"
#include "runtime/core/negotiation/coordinator.h"
#include "runtime/core/negotiation/message.h"

namespace dadt {
namespace core {

class AutotuneDriver {
 public:
  // Reads DADT_AUTOTUNE* from the environment; returns null when autotuning is off.
  static StatusOr<std::unique_ptr<AutotuneDriver>> FromEnv(int64_t fusion_threshold_bytes,
                                                           double cycle_time_ms, int cross_size,
                                                           Coordinator* coordinator);
  // Call after each executed response.
  void OnExecuted(const Response& response);
  // The user set the knobs by hand (Runtime::SetFusionParams): an explicitly set knob is never
  // tuned, so tuning ends where it is, with one line on stderr. No-op once settled.
  void StopTuning();
  bool tuning() const { return manager_.tuning(); }

 private:
  AutotuneDriver(autotune::ParameterManagerOptions options, Coordinator* coordinator);
  void Apply();

  autotune::ParameterManager manager_;
  Coordinator* coordinator_;
  std::unordered_set<std::string> step_names_;
  int64_t step_bytes_ = 0;
  std::chrono::steady_clock::time_point step_start_;
  bool started_ = false;
};

}  // namespace core
}  // namespace dadt
