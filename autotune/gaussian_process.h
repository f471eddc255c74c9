// GaussianProcess: Gaussian-process regression, the surrogate model of the autotuner.
//
// Use it to predict a noisy, expensive scalar function (here: training throughput) from a handful
// of samples, with an uncertainty for each prediction. BayesianOptimizer owns one; nothing else
// in dadt needs it directly.
//
//   GaussianProcess gp(GpOptions{});          // Matern 5/2, noise variance 0.8
//   gp.Fit(x, y);                             // x: n x d, every row inside [0,1]^d
//   Prediction p = gp.Predict(point);         // p.mean, p.std in the units of y
//
// Normalisation (what the hyperparameters are relative to):
//   - Inputs are expected in the unit cube [0,1]^d; callers map their box onto it first
//     (BayesianOptimizer does). Length-scales are therefore fractions of each knob's range.
//   - Targets are standardised inside Fit, y' = (y - mean(y)) / stddev(y), and the prior is a
//     zero-mean GP on y' with signal variance s2 (so s2 is relative to the observed spread).
//     With one sample (or identical ones) stddev := |mean| (or 1).
//   - `noise` is the observation-noise variance in the units of y itself (squared), like
//     scikit-learn's alpha; Fit converts it to noise / stddev(y)^2 on y'. It is NOT relative to the
//     spread of the samples: if it were (as in Horovod, which adds 0.8^2 to the standardised
//     kernel), exploring one terrible setting would inflate the assumed noise until the small
//     differences near the optimum drown in it. ParameterManager feeds scores in percent of the
//     initial setting's throughput, so its default 0.8 means ~0.9% measurement jitter: plausible
//     for the mean of 10 training steps; noisier jobs should raise it.
//   - Fit picks the length-scale, s2, the categorical correlation (and, with noise_multipliers,
//     the noise) from small grids by
//     maximising the log marginal likelihood plus a weak log-normal prior on the length-scale
//     (a few hundred Cholesky factorisations of an n x n matrix, n <= ~30: well under 1 ms).
//
// Kernel: k(a, b) = s2 * m(|a_c - b_c| / l) * rho^(number of categorical coordinates that differ),
// where a_c are the continuous coordinates and m is Matern 5/2 or RBF. The categorical factor
// (an "overlap" kernel) lets a flag's two settings share the continuous shape, learning only how
// much they differ; treating the flag as an ordinary coordinate would make them almost unrelated.
//
// Not thread-safe; Fit and Predict are meant for one thread (rank 0's loop thread).
#pragma once

#include <vector>

#include <Eigen/Dense>

namespace dadt {
namespace autotune {

enum class KernelType {
  kRbf,       // squared exponential: very smooth sample paths
  kMatern52,  // twice differentiable; the usual choice for Bayesian optimisation (Snoek et al.)
};

struct GpOptions {
  KernelType kernel = KernelType::kMatern52;
  // Observation-noise variance in the units of y squared (see the banner); >= 0. Tests use a
  // tiny value to check interpolation.
  double noise = 0.8;
  // Multipliers of `noise` that Fit tries along with the other hyperparameters, keeping the one
  // with the highest marginal likelihood: {1} uses `noise` as given; {1, 2, 4, ...} treats it as
  // a floor and lets the samples say how noisy they are (when noise > 0).
  std::vector<double> noise_multipliers = {1};
  // Which input coordinates are categorical (compared for equality only); empty: none.
  std::vector<bool> categorical;
  // Grids searched on the log marginal likelihood; a single value fixes that hyperparameter.
  std::vector<double> length_scales = {0.05, 0.08, 0.12, 0.18, 0.27, 0.4, 0.6, 0.9, 1.35, 2.0};
  std::vector<double> signal_variances = {0.25, 0.5, 1, 2, 4, 8, 16, 32, 64};
  std::vector<double> category_correlations = {0.2, 0.5, 0.8, 0.95};  // rho, used if any
};

struct Prediction {
  double mean = 0;
  double std = 0;  // of the latent function (without observation noise), in the units of y
};

class GaussianProcess {
 public:
  explicit GaussianProcess(GpOptions options = {});

  // Conditions on n samples: rows of `x` (n x d, inside [0,1]^d) with targets `y` (n). Replaces any
  // previous fit. n == 0 resets to the prior (mean 0, std sqrt(signal variance)).
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y);

  // Changes GpOptions::noise (>= 0) for the next Fit.
  void set_noise(double noise);

  Prediction Predict(const Eigen::VectorXd& x) const;
  // Batched form: one prediction per row of `x`, written to `mean` and `std` (resized to rows).
  void PredictBatch(const Eigen::MatrixXd& x, Eigen::VectorXd* mean, Eigen::VectorXd* std) const;

  int num_samples() const { return static_cast<int>(x_.rows()); }
  double length_scale() const { return length_scale_; }
  double signal_variance() const { return signal_variance_; }
  double category_correlation() const { return rho_; }
  // The observation-noise variance Fit chose (noise x the chosen multiplier), units of y squared.
  double noise() const { return noise_; }
  double log_marginal_likelihood() const { return lml_; }
  // The standardisation applied to y: y' = (y - y_offset()) / y_scale().
  double y_offset() const { return y_offset_; }
  double y_scale() const { return y_scale_; }

 private:
  struct Hyper {
    double length, variance, rho;
    double noise = 0;  // observation-noise variance on y'
  };
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b, const Hyper& h) const;
  // Factorises K + noise I (on y'); false if it is not positive definite even with jitter.
  bool Factorise(const Hyper& h, Eigen::LLT<Eigen::MatrixXd>* llt) const;
  bool IsCategorical(int i) const;

  GpOptions options_;
  Eigen::MatrixXd x_;
  Eigen::VectorXd y_std_;  // standardised targets
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;  // (K + noise I)^-1 y_std_
  double length_scale_;
  double signal_variance_;
  double rho_ = 1;
  double noise_ = 0;
  double lml_ = 0;
  double y_offset_ = 0;
  double y_scale_ = 1;
};

}  // namespace autotune
}  // namespace dadt
