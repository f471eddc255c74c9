// BayesianOptimizer: maximises an expensive, noisy black-box function over a box, one sample at a
// time (Gaussian process surrogate + expected improvement; the algorithm and its trade-offs are
// described at the top of bayesian_optimizer.cc).
//
// ParameterManager drives one of these over the runtime's knobs; it is usable on its own:
//
//   BayesianOptimizer opt({{0, 64}, {1, 100}}, BayesOptOptions{});   // two continuous knobs
//   for (int i = 0; i < 20; ++i) {
//     Eigen::VectorXd x = opt.NextSample();     // in the box's own units
//     opt.AddSample(x, Measure(x));             // larger is better
//   }
//   BayesianOptimizer::Sample best = opt.BestByModel();   // or Best(): highest observed y
//
// A dimension marked categorical takes the integer levels lower, lower+1, ..., upper only (a
// boolean knob is {0, 1}); NextSample never proposes anything in between.
//
// Reproducible: the same seed and samples give the same proposals (std::mt19937_64, whose output
// the standard fixes, with an own uniform mapping; only floating-point rounding may differ
// between compilers or CPUs). Only rank 0 runs it, so ranks never need to agree on it.
// Not thread-safe; one thread (rank 0's loop thread) owns it.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>

#include "autotune/gaussian_process.h"

namespace dadt {
namespace autotune {

struct Dimension {
  double lower = 0;
  double upper = 1;
  bool categorical = false;
};

struct BayesOptOptions {
  GpOptions gp;
  // EI's exploration margin, in units of the standardised score (see gaussian_process.h): a
  // candidate must beat the incumbent by xi to count as an improvement. 0.01 is the customary
  // value; larger explores more.
  double xi = 0.01;
  // Proposals before the GP is trusted: space-filling (maximin) points instead of EI. Samples
  // added by the caller count towards it.
  int initial_samples = 3;
  int num_candidates = 2000;  // random EI evaluations per proposal
  int num_refine = 5;         // best candidates refined by a local compass search
  uint64_t seed = 0;
};

class BayesianOptimizer {
 public:
  struct Sample {
    Eigen::VectorXd x;
    double y = 0;
  };

  explicit BayesianOptimizer(std::vector<Dimension> bounds, BayesOptOptions options = {});

  // Records f(x) = y and refits the GP (cheap: n is a few dozen at most). x is clamped to the box
  // and categorical coordinates are rounded to their nearest level.
  void AddSample(const Eigen::VectorXd& x, double y);
  // Changes the GP's observation-noise variance (GpOptions::noise) from the next AddSample on.
  void set_noise(double noise) { gp_.set_noise(noise); }
  // The next point to evaluate, in the box's units.
  Eigen::VectorXd NextSample();
  // The sample with the highest observed y. Requires num_samples() > 0.
  const Sample& Best() const;
  // The sampled point whose posterior mean is highest: the noise-aware choice, since with noisy
  // samples the highest observed y is biased upwards (the luckiest draw wins). Its `y` is the
  // posterior mean there, in the units of y. Requires num_samples() > 0.
  Sample BestByModel() const;

  // The posterior mean at x (box units), in the units of y.
  double PosteriorMean(const Eigen::VectorXd& x) const;

  // Expected improvement at x (box units) under the current fit, in the units of y. 0 where the
  // GP is certain that x is no better than the incumbent.
  double ExpectedImprovement(const Eigen::VectorXd& x) const;

  int num_samples() const { return static_cast<int>(samples_.size()); }
  int dimensions() const { return static_cast<int>(bounds_.size()); }
  const std::vector<Sample>& samples() const { return samples_; }
  const GaussianProcess& gp() const { return gp_; }

 private:
  Eigen::VectorXd ToUnit(const Eigen::VectorXd& x) const;
  Eigen::VectorXd FromUnit(const Eigen::VectorXd& u) const;
  Eigen::VectorXd Snap(Eigen::VectorXd u) const;  // clamp to [0,1], round categorical levels
  Eigen::VectorXd RandomUnitPoint();
  double Uniform();
  // EI of each row of `u` (unit cube), in standardised-score units.
  Eigen::VectorXd UnitEi(const Eigen::MatrixXd& u) const;
  // UnitEi, but -1 for rows too close to an existing sample (never proposed).
  Eigen::VectorXd Acquisition(const Eigen::MatrixXd& u) const;
  Eigen::VectorXd SpaceFillingPoint();
  Eigen::VectorXd Refine(Eigen::VectorXd u, double* ei) const;
  double MinDistanceToSamples(const Eigen::VectorXd& u) const;

  std::vector<Dimension> bounds_;
  BayesOptOptions options_;
  std::mt19937_64 rng_;
  GaussianProcess gp_;
  std::vector<Sample> samples_;
  Eigen::MatrixXd unit_x_;  // samples in the unit cube, one per row
  double incumbent_ = 0;    // best posterior mean at a sample, standardised
  int best_ = -1;
  int best_by_model_ = -1;  // the sample where that mean is
};

}  // namespace autotune
}  // namespace dadt
