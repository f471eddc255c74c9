// Bayesian optimisation: Gaussian process + expected improvement.
//
// Problem: maximise f over a box when each evaluation costs a whole sample of training steps (the
// tuner gets ~20 of them) and returns a noisy score. Gradient-free methods that need hundreds of
// evaluations (Nelder-Mead, CMA-ES, grids) are out; a model of f is cheap by comparison.
//
// Algorithm (one proposal per call to NextSample):
//   1. Map the box onto the unit cube, so one isotropic length-scale fits knobs with different
//      units (bytes vs milliseconds); a categorical knob's levels are scaled into [0,1] and the
//      GP compares them for equality only.
//   2. Until `initial_samples` samples exist, propose a space-filling point (the best of 256
//      random points by distance to the nearest sample): with one or two samples the GP's
//      hyperparameters are meaningless and EI would just exploit a guess.
//   3. Otherwise the GP (refit in AddSample; hyperparameters by marginal likelihood) gives a
//      posterior mean mu(x) and std s(x) in standardised units. With the incumbent
//      m* = max of mu over the sampled points (the noise-aware choice: the best raw score may be
//      a lucky draw), expected improvement is
//        EI(x) = (mu - m* - xi) Phi(z) + s phi(z),   z = (mu - m* - xi) / s,
//      large where the mean is high (exploitation) or the uncertainty is (exploration); xi tilts
//      the balance towards exploration.
//   4. EI is multimodal and cheap, so maximise it globally by brute force: `num_candidates`
//      uniform random points (categoricals drawn among their levels), then a compass search
//      (+/- step along each continuous axis, halving the step when stuck) from the
//      `num_refine` best candidates, from the best sample, and from the best sample with each
//      categorical knob moved to each other level. No gradients or L-BFGS needed.
//   5. Points within 0.01 (unit cube) of a sample are excluded: with a noisy model EI likes to
//      re-measure the incumbent, which spends one of ~20 samples on a setting already known.
//      If EI is ~0 everywhere (the model is sure nothing beats the incumbent), propose the
//      candidate with the largest uncertainty.
//
// Trade-offs: an isotropic kernel shares one length-scale across the continuous knobs (fine on
// the unit cube, and it keeps the hyperparameter search to a small grid); categorical knobs
// enter the kernel as a correlation rho per differing level (gaussian_process.h), so a flag's
// two settings share what was learnt about the continuous knobs; random + local search costs
// more per proposal than L-BFGS (a few ms for d <= 4, n <= 30, nothing next to a sample of ten
// training steps) but never stalls at a boundary and needs no derivatives.
#include "autotune/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "runtime/common/logging.h"

namespace dadt {
namespace autotune {
namespace {

constexpr int kSpaceFillingCandidates = 256;
constexpr double kInitialStep = 0.05;  // compass search, in unit-cube coordinates
constexpr double kFinalStep = 1e-3;
constexpr int kMaxRefineIterations = 500;
constexpr double kNegligibleEi = 1e-9;  // standardised units
// Proposals keep this far (unit-cube distance) from every sample: re-measuring a known setting
// only re-draws its noise, and with ~20 samples each one should teach the model something new.
constexpr double kMinSeparation = 0.01;

GpOptions WithCategoricalMask(GpOptions gp, const std::vector<Dimension>& bounds) {
  gp.categorical.clear();
  for (const Dimension& d : bounds) gp.categorical.push_back(d.categorical);
  return gp;
}

constexpr double kPi = 3.14159265358979323846;

double NormPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * kPi); }
double NormCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

BayesianOptimizer::BayesianOptimizer(std::vector<Dimension> bounds, BayesOptOptions options)
    : bounds_(std::move(bounds)),
      options_(std::move(options)),
      rng_(options_.seed),
      gp_(WithCategoricalMask(options_.gp, bounds_)),
      unit_x_(0, static_cast<Eigen::Index>(bounds_.size())) {
  DADT_CHECK(!bounds_.empty()) << "BayesianOptimizer needs at least one dimension";
  for (const Dimension& d : bounds_) {
    DADT_CHECK(d.lower <= d.upper) << "bad bounds [" << d.lower << ", " << d.upper << "]";
  }
  DADT_CHECK(options_.num_candidates > 0) << "num_candidates " << options_.num_candidates;
}

double BayesianOptimizer::Uniform() { return (rng_() >> 11) * 0x1.0p-53; }

Eigen::VectorXd BayesianOptimizer::ToUnit(const Eigen::VectorXd& x) const {
  Eigen::VectorXd u(x.size());
  for (int i = 0; i < x.size(); ++i) {
    const double w = bounds_[i].upper - bounds_[i].lower;
    u[i] = w > 0 ? (x[i] - bounds_[i].lower) / w : 0.0;
  }
  return Snap(u);
}

Eigen::VectorXd BayesianOptimizer::FromUnit(const Eigen::VectorXd& u) const {
  Eigen::VectorXd x(u.size());
  for (int i = 0; i < u.size(); ++i) {
    x[i] = bounds_[i].lower + u[i] * (bounds_[i].upper - bounds_[i].lower);
    if (bounds_[i].categorical) x[i] = std::round(x[i]);
  }
  return x;
}

Eigen::VectorXd BayesianOptimizer::Snap(Eigen::VectorXd u) const {
  for (int i = 0; i < u.size(); ++i) {
    u[i] = std::clamp(u[i], 0.0, 1.0);
    const double levels = bounds_[i].upper - bounds_[i].lower;
    if (bounds_[i].categorical && levels > 0) u[i] = std::round(u[i] * levels) / levels;
  }
  return u;
}

Eigen::VectorXd BayesianOptimizer::RandomUnitPoint() {
  Eigen::VectorXd u(dimensions());
  for (int i = 0; i < u.size(); ++i) {
    u[i] = Uniform();
    const double levels = bounds_[i].upper - bounds_[i].lower;
    if (bounds_[i].categorical && levels > 0) {  // each of the levels + 1 values equally likely
      u[i] = std::min(std::floor(u[i] * (levels + 1)), levels) / levels;
    }
  }
  return Snap(u);
}

void BayesianOptimizer::AddSample(const Eigen::VectorXd& x, double y) {
  DADT_CHECK_EQ(x.size(), dimensions());
  DADT_CHECK(std::isfinite(y)) << "sample value must be finite, got " << y;
  const Eigen::VectorXd u = ToUnit(x);
  Eigen::VectorXd kept(x.size());  // the caller's x, clamped and rounded like u, without a
  for (int i = 0; i < x.size(); ++i) {  // unit-cube round trip that could change its last bits
    kept[i] = std::clamp(x[i], bounds_[i].lower, bounds_[i].upper);
    if (bounds_[i].categorical) kept[i] = std::round(kept[i]);
  }
  samples_.push_back({kept, y});
  if (best_ < 0 || y > samples_[best_].y) best_ = num_samples() - 1;
  unit_x_.conservativeResize(num_samples(), Eigen::NoChange);
  unit_x_.row(num_samples() - 1) = u.transpose();
  Eigen::VectorXd ys(num_samples());
  for (int i = 0; i < num_samples(); ++i) ys[i] = samples_[i].y;
  gp_.Fit(unit_x_, ys);
  Eigen::VectorXd mean, std;
  gp_.PredictBatch(unit_x_, &mean, &std);
  Eigen::Index arg;
  incumbent_ = (mean.maxCoeff(&arg) - gp_.y_offset()) / gp_.y_scale();
  best_by_model_ = static_cast<int>(arg);
}

const BayesianOptimizer::Sample& BayesianOptimizer::Best() const {
  DADT_CHECK_GE(best_, 0) << "Best() before any AddSample()";
  return samples_[best_];
}

BayesianOptimizer::Sample BayesianOptimizer::BestByModel() const {
  DADT_CHECK_GE(best_by_model_, 0) << "BestByModel() before any AddSample()";
  return {samples_[best_by_model_].x, incumbent_ * gp_.y_scale() + gp_.y_offset()};
}

Eigen::VectorXd BayesianOptimizer::UnitEi(const Eigen::MatrixXd& u) const {
  Eigen::VectorXd mean, std;
  gp_.PredictBatch(u, &mean, &std);
  Eigen::VectorXd ei(u.rows());
  for (Eigen::Index i = 0; i < u.rows(); ++i) {
    const double mu = (mean[i] - gp_.y_offset()) / gp_.y_scale();
    const double s = std[i] / gp_.y_scale();
    const double imp = mu - incumbent_ - options_.xi;
    if (s < 1e-12) {
      ei[i] = std::max(imp, 0.0);
    } else {
      const double z = imp / s;
      ei[i] = std::max(imp * NormCdf(z) + s * NormPdf(z), 0.0);
    }
  }
  return ei;
}

Eigen::VectorXd BayesianOptimizer::Acquisition(const Eigen::MatrixXd& u) const {
  Eigen::VectorXd a = UnitEi(u);
  for (Eigen::Index i = 0; i < u.rows(); ++i) {
    if (MinDistanceToSamples(u.row(i).transpose()) < kMinSeparation) a[i] = -1;
  }
  return a;
}

double BayesianOptimizer::PosteriorMean(const Eigen::VectorXd& x) const {
  DADT_CHECK_EQ(x.size(), dimensions());
  return gp_.Predict(ToUnit(x)).mean;
}

double BayesianOptimizer::ExpectedImprovement(const Eigen::VectorXd& x) const {
  DADT_CHECK_EQ(x.size(), dimensions());
  return UnitEi(ToUnit(x).transpose())[0] * gp_.y_scale();
}

double BayesianOptimizer::MinDistanceToSamples(const Eigen::VectorXd& u) const {
  if (num_samples() == 0) return std::numeric_limits<double>::infinity();
  return std::sqrt((unit_x_.rowwise() - u.transpose()).rowwise().squaredNorm().minCoeff());
}

Eigen::VectorXd BayesianOptimizer::SpaceFillingPoint() {
  Eigen::VectorXd best = RandomUnitPoint();
  double best_d = MinDistanceToSamples(best);
  for (int i = 1; i < kSpaceFillingCandidates && num_samples() > 0; ++i) {
    Eigen::VectorXd u = RandomUnitPoint();
    const double d = MinDistanceToSamples(u);
    if (d > best_d) {
      best = u;
      best_d = d;
    }
  }
  return best;
}

Eigen::VectorXd BayesianOptimizer::Refine(Eigen::VectorXd u, double* ei) const {
  std::vector<int> axes;
  for (int i = 0; i < dimensions(); ++i) {
    if (!bounds_[i].categorical && bounds_[i].upper > bounds_[i].lower) axes.push_back(i);
  }
  *ei = Acquisition(u.transpose())[0];
  if (axes.empty()) return u;
  Eigen::MatrixXd moves(2 * axes.size(), dimensions());
  int budget = kMaxRefineIterations;  // EI rises strictly, so this only guards against a bug
  for (double step = kInitialStep; step >= kFinalStep && budget-- > 0;) {
    for (size_t a = 0; a < axes.size(); ++a) {
      for (int sign = 0; sign < 2; ++sign) {
        Eigen::VectorXd v = u;
        v[axes[a]] += sign ? step : -step;
        moves.row(2 * a + sign) = Snap(v).transpose();
      }
    }
    Eigen::Index arg;
    const double top = Acquisition(moves).maxCoeff(&arg);
    if (top > *ei) {
      *ei = top;
      u = moves.row(arg).transpose();
    } else {
      step /= 2;
    }
  }
  return u;
}

Eigen::VectorXd BayesianOptimizer::NextSample() {
  if (num_samples() < std::max(1, options_.initial_samples)) {
    return FromUnit(SpaceFillingPoint());
  }
  const int n = options_.num_candidates;
  Eigen::MatrixXd cand(n, dimensions());
  for (int i = 0; i < n; ++i) cand.row(i) = RandomUnitPoint().transpose();
  const Eigen::VectorXd ei = Acquisition(cand);

  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const int k = std::min(n, std::max(0, options_.num_refine));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return ei[a] > ei[b]; });

  std::vector<Eigen::VectorXd> starts;
  for (int i = 0; i < k; ++i) starts.push_back(cand.row(order[i]).transpose());
  // Also from the best sample, as is and with each categorical coordinate moved to each of its
  // other levels: "the best setting so far, but with this flag flipped" is the proposal that
  // random candidates are least likely to come close to.
  const Eigen::VectorXd incumbent = unit_x_.row(best_).transpose();
  starts.push_back(incumbent);
  for (int i = 0; i < dimensions(); ++i) {
    const double levels = bounds_[i].upper - bounds_[i].lower;
    if (!bounds_[i].categorical || levels <= 0) continue;
    for (double level = 0; level <= levels; ++level) {
      Eigen::VectorXd u = incumbent;
      u[i] = level / levels;
      if (u[i] != incumbent[i]) starts.push_back(u);
    }
  }
  Eigen::VectorXd best_u = cand.row(order[0]).transpose();
  double best_ei = ei[order[0]];
  for (const Eigen::VectorXd& start : starts) {
    double value;
    Eigen::VectorXd u = Refine(start, &value);
    if (value > best_ei) {
      best_ei = value;
      best_u = u;
    }
  }

  if (best_ei < kNegligibleEi) {
    // Nothing is expected to improve: learn where the model knows least.
    Eigen::VectorXd mean, std;
    gp_.PredictBatch(cand, &mean, &std);
    for (int i = 0; i < n; ++i) {
      if (ei[i] < 0) std[i] = -1;  // too close to a sample
    }
    Eigen::Index arg;
    std.maxCoeff(&arg);
    best_u = cand.row(arg).transpose();
  }
  return FromUnit(best_u);
}

}  // namespace autotune
}  // namespace dadt
