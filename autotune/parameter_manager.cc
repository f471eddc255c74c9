#include "autotune/parameter_manager.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "runtime/common/logging.h"

namespace dadt {
namespace autotune {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// The optimizer sees the fusion threshold on a log scale (see the header),
// log2(1 + bytes / kFusionScaleBytes).
constexpr double kFusionScaleBytes = 64.0 * 1024;

double FusionToAxis(double bytes) { return std::log2(1.0 + bytes / kFusionScaleBytes); }
double AxisToFusion(double t) { return kFusionScaleBytes * (std::exp2(t) - 1.0); }
constexpr uint8_t kWireVersion = 1;
constexpr size_t kWireSize = 18;
constexpr uint8_t kCacheBit = 1;
constexpr uint8_t kHierarchicalBit = 2;

void PutU64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

const char* OnOff(bool b) { return b ? "on" : "off"; }

}  // namespace

std::string Serialize(const Params& params) {
  std::string out;
  out.reserve(kWireSize);
  out.push_back(static_cast<char>(kWireVersion));
  out.push_back(static_cast<char>((params.response_cache ? kCacheBit : 0) |
                                  (params.hierarchical_allreduce ? kHierarchicalBit : 0)));
  PutU64(static_cast<uint64_t>(params.fusion_threshold_bytes), &out);
  uint64_t cycle_bits;
  std::memcpy(&cycle_bits, &params.cycle_time_ms, sizeof(cycle_bits));
  PutU64(cycle_bits, &out);
  return out;
}

StatusOr<Params> Deserialize(const std::string& bytes) {
  if (bytes.size() != kWireSize) {
    return InvalidArgument("autotune params: expected " + std::to_string(kWireSize) +
                           " bytes, got " + std::to_string(bytes.size()));
  }
  const uint8_t version = static_cast<uint8_t>(bytes[0]);
  const uint8_t flags = static_cast<uint8_t>(bytes[1]);
  if (version != kWireVersion) {
    return InvalidArgument("autotune params: unknown version " + std::to_string(version));
  }
  if (flags & ~(kCacheBit | kHierarchicalBit)) {
    return InvalidArgument("autotune params: unknown flag bits " + std::to_string(flags));
  }
  Params p;
  p.response_cache = flags & kCacheBit;
  p.hierarchical_allreduce = flags & kHierarchicalBit;
  p.fusion_threshold_bytes = static_cast<int64_t>(GetU64(bytes.data() + 2));
  const uint64_t cycle_bits = GetU64(bytes.data() + 10);
  std::memcpy(&p.cycle_time_ms, &cycle_bits, sizeof(cycle_bits));
  if (p.fusion_threshold_bytes < 0) {
    return InvalidArgument("autotune params: negative fusion threshold " +
                           std::to_string(p.fusion_threshold_bytes));
  }
  if (!std::isfinite(p.cycle_time_ms) || p.cycle_time_ms <= 0) {
    return InvalidArgument("autotune params: bad cycle time " + std::to_string(p.cycle_time_ms));
  }
  return p;
}

std::string ToString(const Params& p) {
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "fusion_threshold=%" PRId64 " B (%.1f MiB) cycle_time=%.2f ms response_cache=%s "
                "hierarchical=%s",
                p.fusion_threshold_bytes, p.fusion_threshold_bytes / kMiB, p.cycle_time_ms,
                OnOff(p.response_cache), OnOff(p.hierarchical_allreduce));
  return buf;
}

ParameterManager::ParameterManager(ParameterManagerOptions options)
    : options_(std::move(options)), current_(options_.initial) {
  DADT_CHECK_GE(options_.warmup_samples, 0);
  DADT_CHECK_GE(options_.steps_per_sample, 1);
  DADT_CHECK_GE(options_.max_samples, 1);
  tune_fusion_ = !options_.fixed.fusion_threshold;
  tune_cycle_ = !options_.fixed.cycle_time;
  tune_cache_ = !options_.fixed.response_cache;
  tune_hierarchical_ = !options_.fixed.hierarchical_allreduce && options_.num_hosts > 1;

  // A tuned knob starts inside its box, so that the first scored sample is a point the GP can use.
  if (tune_fusion_) {
    current_.fusion_threshold_bytes =
        std::clamp<int64_t>(current_.fusion_threshold_bytes, 0, kMaxFusionThresholdBytes);
  }
  if (tune_cycle_) {
    current_.cycle_time_ms = std::clamp(current_.cycle_time_ms, kMinCycleTimeMs, kMaxCycleTimeMs);
  }
  changed_ = current_ != options_.initial;

  std::vector<Dimension> dims;
  if (tune_fusion_) dims.push_back({0, FusionToAxis(kMaxFusionThresholdBytes), false});
  if (tune_cycle_) dims.push_back({kMinCycleTimeMs, kMaxCycleTimeMs, false});
  if (tune_cache_) dims.push_back({0, 1, true});
  if (tune_hierarchical_) dims.push_back({0, 1, true});
  if (dims.empty()) return;  // every knob fixed: nothing to do
  max_samples_ = options_.max_samples;
  if (!tune_fusion_ && !tune_cycle_) {  // only flags: each combination once is enough
    max_samples_ = std::min(max_samples_, (tune_cache_ ? 2 : 1) * (tune_hierarchical_ ? 2 : 1));
  }

  BayesOptOptions bo;
  bo.gp.noise = options_.gp_noise;
  // The noise floor is max(gp_noise, what the steps of each sample say: NoiseVariance()); the GP
  // may fit up to 256x that (with a prior that favours the floor), for load that changes between
  // samples and that no single sample shows. How noisy the samples are depends on the machine and
  // its load, which the user rarely knows.
  bo.gp.noise_multipliers = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  bo.seed = options_.seed;
  optimizer_ = std::make_unique<BayesianOptimizer>(std::move(dims), bo);
  tuning_ = true;
  warmup_left_ = options_.warmup_samples;

  if (!options_.log_path.empty()) {
    log_.open(options_.log_path, std::ios::out | std::ios::trunc);
    if (!log_) {
      log_status_ = InvalidArgument("autotune: cannot open log file " + options_.log_path + ": " +
                                    std::strerror(errno));
      DADT_LOG(WARNING) << log_status_.message();
    } else {
      log_ << "sample,fusion_threshold_bytes,cycle_time_ms,response_cache,"
              "hierarchical_allreduce,score_bytes_per_sec\n"
           << std::flush;
    }
  }
}

Eigen::VectorXd ParameterManager::ToVector(const Params& p) const {
  Eigen::VectorXd x(optimizer_->dimensions());
  int i = 0;
  if (tune_fusion_) x[i++] = FusionToAxis(static_cast<double>(p.fusion_threshold_bytes));
  if (tune_cycle_) x[i++] = p.cycle_time_ms;
  if (tune_cache_) x[i++] = p.response_cache ? 1 : 0;
  if (tune_hierarchical_) x[i++] = p.hierarchical_allreduce ? 1 : 0;
  return x;
}

Params ParameterManager::FromVector(const Eigen::VectorXd& x) const {
  Params p = current_;  // fixed knobs keep their values
  int i = 0;
  if (tune_fusion_) {
    p.fusion_threshold_bytes = std::clamp<int64_t>(std::llround(AxisToFusion(x[i++])), 0,
                                                   kMaxFusionThresholdBytes);
  }
  if (tune_cycle_) {  // to the microsecond
    p.cycle_time_ms = std::clamp(std::round(x[i++] * 1000) / 1000, kMinCycleTimeMs,
                                 kMaxCycleTimeMs);
  }
  if (tune_cache_) p.response_cache = x[i++] > 0.5;
  if (tune_hierarchical_) p.hierarchical_allreduce = x[i++] > 0.5;
  return p;
}

void ParameterManager::Move(const Params& next) {
  changed_ = next != current_;
  current_ = next;
}

void ParameterManager::Update(int64_t bytes, double seconds) {
  changed_ = false;
  if (!tuning_ || bytes < 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  bytes_ += bytes;
  seconds_ += seconds;
  const double rate = static_cast<double>(bytes) / seconds;
  rate_sum_ += rate;
  rate_square_sum_ += rate * rate;
  if (++steps_ < options_.steps_per_sample) return;
  const double score = static_cast<double>(bytes_) / seconds_;
  const int n = steps_;
  if (n >= 2 && rate_sum_ > 0) {
    // How much the steps of this one sample disagree: the relative variance of their mean.
    const double mean = rate_sum_ / n;
    const double var = std::max(0.0, (rate_square_sum_ - n * mean * mean) / (n - 1));
    step_noise_.push_back(var / (n * mean * mean));
  }
  steps_ = 0;
  bytes_ = 0;
  seconds_ = 0;
  rate_sum_ = 0;
  rate_square_sum_ = 0;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  FinishSample(score);
}

double ParameterManager::NoiseVariance() const {
  if (step_noise_.empty()) return options_.gp_noise;
  // The median over the samples so far (warm-up included) of the relative variance of a sample's
  // mean step rate, in percent^2: one sample disturbed by a burst of load does not set it alone.
  std::vector<double> v = step_noise_;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return std::max(options_.gp_noise, 1e4 * v[v.size() / 2]);
}

void ParameterManager::FinishSample(double score) {
  // The optimizer sees scores in percent of the first scored sample (the initial setting), the
  // unit that gp_noise is expressed in (gaussian_process.h).
  if (reference_score_ <= 0) reference_score_ = score > 0 ? score : 1.0;
  optimizer_->set_noise(NoiseVariance());
  optimizer_->AddSample(ToVector(current_), 100.0 * score / reference_score_);
  scores_.push_back(score);
  WriteRow(std::to_string(optimizer_->num_samples() - 1), current_, score);
  if (optimizer_->num_samples() >= max_samples_) {
    Settle();
  } else {
    Move(FromVector(optimizer_->NextSample()));
  }
}

void ParameterManager::Settle() {
  // The sampled setting with the best posterior mean, not the best single score: with noisy
  // samples the highest score is biased upwards (the luckiest draw wins), while the model pools
  // every sample near a setting. Its score is the model's estimate, back in bytes/s.
  const BayesianOptimizer::Sample best = optimizer_->BestByModel();
  int index = 0;
  while (optimizer_->samples()[index].x != best.x) ++index;
  const Params chosen = FromVector(best.x);
  const double estimate = best.y * reference_score_ / 100.0;
  const double measured = scores_[index];
  // The initial setting by the same model, so that the gain compares like with like.
  const double initial_estimate =
      optimizer_->PosteriorMean(optimizer_->samples().front().x) * reference_score_ / 100.0;
  Move(chosen);
  tuning_ = false;
  WriteRow("best", chosen, estimate);
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                " model estimate %.4g B/s vs %.4g B/s for the initial setting (%+.1f%%); measured "
                "%.4g B/s (sample %d)",
                estimate, initial_estimate,
                initial_estimate > 0 ? 100.0 * (estimate / initial_estimate - 1.0) : 0.0, measured,
                index);
  summary_ = "autotune: chose " + ToString(chosen) + " after " +
             std::to_string(optimizer_->num_samples()) + " samples;" + buf;
  if (options_.on_done) {
    options_.on_done(summary_);
  } else {
    DADT_LOG(INFO) << summary_;
  }
}

void ParameterManager::Stop() {
  if (!tuning_) return;
  tuning_ = false;
  changed_ = false;
}

void ParameterManager::WriteRow(const std::string& label, const Params& p, double score) {
  if (!log_.is_open() || !log_) return;
  char buf[160];
  std::snprintf(buf, sizeof(buf), ",%" PRId64 ",%.6g,%d,%d,%.9g\n", p.fusion_threshold_bytes,
                p.cycle_time_ms, p.response_cache ? 1 : 0, p.hierarchical_allreduce ? 1 : 0,
                score);
  log_ << label << buf << std::flush;
}

}  // namespace autotune
}  // namespace dadt
