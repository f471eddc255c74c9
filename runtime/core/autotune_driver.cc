#include "runtime/core/autotune_driver.h"

#include <cmath>
#include <cstdio>

#include "runtime/common/env.h"

namespace dadt {
namespace core {

StatusOr<std::unique_ptr<AutotuneDriver>> AutotuneDriver::FromEnv(int64_t fusion_threshold_bytes,
                                                                 double cycle_time_ms,
                                                                 int cross_size,
                                                                 Coordinator* coordinator) {
  auto on = env::GetBool(env::kAutotune, false);
  if (!on.ok()) return on.status();
  if (!*on) return std::unique_ptr<AutotuneDriver>();
  autotune::ParameterManagerOptions o;
  auto warmup = env::GetInt(env::kAutotuneWarmupSamples, o.warmup_samples);
  auto steps = env::GetInt(env::kAutotuneStepsPerSample, o.steps_per_sample);
  auto samples = env::GetInt(env::kAutotuneMaxSamples, o.max_samples);
  auto noise = env::GetDouble(env::kAutotuneNoise, o.gp_noise);
  for (const Status* s : {&warmup.status(), &steps.status(), &samples.status(), &noise.status()}) {
    if (!s->ok()) return *s;
  }
  if (*warmup < 0 || *steps < 1 || *samples < 1 || *noise < 0) {
    return InvalidArgument("DADT_AUTOTUNE_*: warm-up samples must be >= 0, steps per sample and "
                           "max samples >= 1, and the noise >= 0");
  }
  o.warmup_samples = static_cast<int>(*warmup);
  o.steps_per_sample = static_cast<int>(*steps);
  o.max_samples = static_cast<int>(*samples);
  o.gp_noise = *noise;
  o.initial.fusion_threshold_bytes = fusion_threshold_bytes;
  o.initial.cycle_time_ms = cycle_time_ms;
  o.initial.response_cache = true;
  o.initial.hierarchical_allreduce = false;
  // Knobs the user set explicitly are not tuned; the two we cannot switch job-wide are fixed.
  o.fixed.fusion_threshold = env::IsSet(env::kFusionThreshold);
  o.fixed.cycle_time = env::IsSet(env::kCycleTime);
  o.fixed.response_cache = env::IsSet(env::kCacheCapacity);
  o.fixed.hierarchical_allreduce = true;
  o.num_hosts = cross_size;
  o.log_path = env::GetString(env::kAutotuneLog);
  o.on_done = [](const std::string& line) {
    std::fprintf(stderr, "[dadt] %s\n", line.c_str());
    std::fflush(stderr);
  };
  std::unique_ptr<AutotuneDriver> d(new AutotuneDriver(std::move(o), coordinator));
  if (!d->manager_.log_status().ok()) return d->manager_.log_status();
  d->Apply();
  return d;
}

AutotuneDriver::AutotuneDriver(autotune::ParameterManagerOptions options, Coordinator* coordinator)
    : manager_(std::move(options)), coordinator_(coordinator) {}

void AutotuneDriver::Apply() {
  const autotune::Params& p = manager_.current();
  coordinator_->set_fusion_threshold(p.fusion_threshold_bytes);
  coordinator_->set_response_cache(p.response_cache);
  coordinator_->set_cycle_time(
      std::chrono::microseconds(static_cast<int64_t>(std::llround(p.cycle_time_ms * 1000))));
}

void AutotuneDriver::StopTuning() {
  if (!manager_.tuning()) return;
  manager_.Stop();
  std::fprintf(stderr, "[dadt] autotune: stopped after %d samples; the knobs were set by hand\n",
               manager_.samples_scored());
  std::fflush(stderr);
}

void AutotuneDriver::OnExecuted(const Response& r) {
  if (r.type != Response::Type::kAllreduce || !manager_.tuning()) return;
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    step_start_ = now;
  }
  bool repeats = false;
  for (const std::string& name : r.names) repeats |= step_names_.count(name) > 0;
  if (repeats) {  // a new step begins with this response
    const double seconds = std::chrono::duration<double>(now - step_start_).count();
    manager_.Update(step_bytes_, seconds);
    if (manager_.changed()) Apply();
    step_names_.clear();
    step_bytes_ = 0;
    step_start_ = now;
  }
  int64_t elements = 0;
  for (int64_t n : r.sizes) elements += n;
  step_bytes_ += elements * static_cast<int64_t>(DataTypeSize(r.dtype));
  step_names_.insert(r.names.begin(), r.names.end());
}

}  // namespace core
}  // namespace dadt
