// ParameterManager: what the runtime talks to when DADT_AUTOTUNE is on. It turns a stream of
// (bytes reduced, seconds) measurements into a sequence of knob settings, and finally the best.
//
//   ParameterManagerOptions o;                 // Horovod's defaults: 3 warm-up samples,
//   o.initial = current_params;                //   10 steps per sample, 20 samples, noise 0.8
//   o.num_hosts = cross_size;
//   ParameterManager pm(o);
//   ...                                        // rank 0's loop thread, once per completed step:
//   pm.Update(bytes_reduced, seconds_elapsed);
//   if (pm.changed()) Broadcast(Serialize(pm.current()));   // every rank applies it at once
//
// Knobs and how they are tuned:
//   fusion_threshold_bytes  continuous, 0 .. 128 MiB     (DADT_FUSION_THRESHOLD)
//   cycle_time_ms           continuous, 1 .. 100 ms      (DADT_CYCLE_TIME)
// The fusion threshold reaches the optimizer on a log scale, log2(1 + bytes / 64 KiB): what
// matters is its ratio to the tensor sizes, so 256 KiB -> 1 MiB is as big a move as 32 -> 128 MiB,
// and a linear axis would squeeze every small threshold into a corner of the box. The cycle time
// stays linear. The box holds the runtime's defaults (128 MiB, 1 ms), so the first scored sample
// measures them as they are.
//   response_cache          on/off                      (DADT_CACHE_CAPACITY, 0 = off)
//   hierarchical_allreduce  on/off, only with > 1 host   (DADT_HIERARCHICAL_ALLREDUCE)
// A knob that the user set explicitly is fixed (options.fixed) and never tuned, as in Horovod.
// The two booleans are extra {0,1} dimensions of the same GP rather than one GP per combination:
// with 20 samples, four separate GPs would get ~5 samples each and each would have to rediscover
// the fusion/cycle landscape. One GP spends a single budget where EI says, and its kernel
// multiplies by a fitted correlation rho per differing flag, so the continuous shape is shared
// and only the flags' effect has to be learnt; the optimizer also tries "best so far with one
// flag flipped" as a candidate.
//
// Sampling: a sample is `steps_per_sample` consecutive Update() calls at one setting; its score
// is sum(bytes) / sum(seconds), bytes per second. The first `warmup_samples` samples (at the
// initial setting, while caches and allocators settle) are discarded. The first scored sample
// measures the initial setting (clamped into the box), so the model always knows the baseline it
// has to beat; after each scored sample the optimizer proposes the next setting, seeing scores
// in percent of that first one (the unit of gp_noise). gp_noise is a floor for the GP's noise
// variance: each sample's steps also measure it (the relative variance of their mean rate; the
// median over samples, warm-up included, is used when larger), and the GP may fit up to 256x that
// by marginal likelihood, for drift between samples. After `max_samples` scored samples (or every
// flag combination once, when only flags are tuned) the manager settles on the sampled setting
// with the best posterior mean (not the best single score, which favours the luckiest draw), logs
// ONE line (options.on_done, else DADT_LOG(INFO)) and stops tuning; Update() is then a no-op.
//
// Runtime integration (rank 0's loop thread; the only thread that touches this object):
//   - construct at init when DADT_AUTOTUNE is on: initial = the effective knobs, fixed = which of
//     DADT_FUSION_THRESHOLD / DADT_CYCLE_TIME / DADT_CACHE_CAPACITY / DADT_HIERARCHICAL_ALLREDUCE
//     the user set (env::IsSet), num_hosts = cross size;
//   - call Update() once per training step: bytes = allreduce bytes completed since the previous
//     call, seconds = wall-clock time since the previous call (idle time included, so a setting
//     that makes ranks wait scores lower). A step ends when a tensor name that was already
//     reduced since the last call is released again (Horovod counts steps the same way);
//   - when changed(), put Serialize(current()) into the next response list, so that every rank
//     applies it before executing that list: all ranks switch at the same point.
//
// CSV log (options.log_path): header `sample,fusion_threshold_bytes,cycle_time_ms,
// response_cache,hierarchical_allreduce,score_bytes_per_sec`, one row per scored sample
// (sample = 0, 1, ...), and a last row with sample = `best`: the chosen setting with the model's
// estimate of its score. Rows are flushed as written.
//
// Environment (documented here; the runtime reads them, names are not in env.h yet):
//   DADT_AUTOTUNE=1                          turn the tuner on
//   DADT_AUTOTUNE_LOG=path                   -> log_path
//   DADT_AUTOTUNE_WARMUP_SAMPLES=3           -> warmup_samples
//   DADT_AUTOTUNE_STEPS_PER_SAMPLE=10        -> steps_per_sample
//   DADT_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=20   -> max_samples
//   DADT_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.8 -> gp_noise
//
// Threading: not thread-safe; only rank 0's loop thread touches it. Other ranks never construct
// one: they Deserialize() what rank 0 broadcasts.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autotune/bayesian_optimizer.h"
#include "runtime/common/env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace autotune {

inline constexpr int64_t kMaxFusionThresholdBytes = 128LL * 1024 * 1024;
inline constexpr double kMinCycleTimeMs = 1.0;
inline constexpr double kMaxCycleTimeMs = 100.0;

// One setting of every knob. Defaults are the runtime's (runtime/common/env.h).
struct Params {
  int64_t fusion_threshold_bytes = env::kDefaultFusionThresholdBytes;
  double cycle_time_ms = env::kDefaultCycleTimeMs;
  bool response_cache = true;
  bool hierarchical_allreduce = false;

  bool operator==(const Params& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes &&
           cycle_time_ms == o.cycle_time_ms && response_cache == o.response_cache &&
           hierarchical_allreduce == o.hierarchical_allreduce;
  }
  bool operator!=(const Params& o) const { return !(*this == o); }
};

// 18 bytes, little-endian: version (1), flags (bit 0 response_cache, bit 1 hierarchical), int64
// fusion threshold, IEEE-754 double cycle time. Deserialize rejects a wrong size or version,
// unknown flag bits, a negative threshold and a non-finite or non-positive cycle time.
std::string Serialize(const Params& params);
StatusOr<Params> Deserialize(const std::string& bytes);
// "fusion_threshold=33554432 B (32.0 MiB) cycle_time=5.00 ms response_cache=on hierarchical=off"
std::string ToString(const Params& params);

struct FixedKnobs {
  bool fusion_threshold = false;
  bool cycle_time = false;
  bool response_cache = false;
  bool hierarchical_allreduce = false;
};

struct ParameterManagerOptions {
  int warmup_samples = 3;
  int steps_per_sample = 10;
  int max_samples = 20;
  // Measurement-noise variance of a sample's score in percent of the initial setting's score,
  // squared: 0.8 ~ 0.9% jitter (gaussian_process.h explains the normalisation).
  // It is the floor of the noise the GP fits (see above).
  double gp_noise = 0.8;
  Params initial;         // starting setting; fixed knobs keep these values throughout
  FixedKnobs fixed;
  int num_hosts = 1;      // hierarchical_allreduce is tuned only when > 1
  std::string log_path;   // CSV; empty: none
  std::function<void(const std::string&)> on_done;  // receives the one summary line
  uint64_t seed = 0;
};

class ParameterManager {
 public:
  explicit ParameterManager(ParameterManagerOptions options);

  // One completed step (or cycle) on rank 0: `bytes` reduced in `seconds` of wall-clock time.
  // Calls with seconds <= 0 or negative bytes are ignored.
  void Update(int64_t bytes, double seconds);

  // True when the constructor or the latest Update() changed current().
  bool changed() const { return changed_; }
  const Params& current() const { return current_; }
  // False once settled on the best setting, or from the start when every knob is fixed.
  bool tuning() const { return tuning_; }
  int samples_scored() const { return optimizer_ ? optimizer_->num_samples() : 0; }
  // Ends tuning at the current setting, without a `best` row or summary (the runtime calls it
  // when the user sets the knobs by hand). No-op when not tuning.
  void Stop();
  // The summary line, empty until tuning has finished.
  const std::string& summary() const { return summary_; }
  // OK, or why the CSV log could not be opened (tuning goes on without it).
  const Status& log_status() const { return log_status_; }

 private:
  Eigen::VectorXd ToVector(const Params& p) const;
  Params FromVector(const Eigen::VectorXd& x) const;
  void Move(const Params& next);
  void FinishSample(double score);
  void Settle();
  double NoiseVariance() const;
  void WriteRow(const std::string& label, const Params& p, double score);

  ParameterManagerOptions options_;
  bool tune_fusion_, tune_cycle_, tune_cache_, tune_hierarchical_;
  std::unique_ptr<BayesianOptimizer> optimizer_;
  Params current_;
  bool changed_ = false;
  bool tuning_ = false;
  int max_samples_ = 0;   // options.max_samples, or fewer when only flags are tuned
  int warmup_left_ = 0;
  int steps_ = 0;
  int64_t bytes_ = 0;
  double seconds_ = 0;
  double rate_sum_ = 0;         // of bytes/s per step, in the current sample
  double rate_square_sum_ = 0;
  std::vector<double> step_noise_;  // per finished sample: relative variance of its mean rate
  double reference_score_ = 0;  // the first scored sample's; the optimizer sees percent of it
  std::vector<double> scores_;  // bytes/s of each scored sample
  std::ofstream log_;
  Status log_status_;
  std::string summary_;
};

}  // namespace autotune
}  // namespace dadt
