#include "autotune/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "runtime/common/logging.h"

namespace dadt {
namespace autotune {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kPriorLength = 0.4;  // unit-cube units
// Width (in e-folds) of the log-normal prior on the noise multiplier, centred on 1: the fit
// raises the noise above GpOptions::noise only when the samples clearly ask for it (e.g. two
// near-identical settings with very different scores).
constexpr double kNoisePriorWidth = 2.3;

double Middle(const std::vector<double>& grid) { return grid[grid.size() / 2]; }

}  // namespace

GaussianProcess::GaussianProcess(GpOptions options) : options_(std::move(options)) {
  DADT_CHECK(!options_.length_scales.empty()) << "GpOptions.length_scales is empty";
  DADT_CHECK(!options_.signal_variances.empty()) << "GpOptions.signal_variances is empty";
  DADT_CHECK(!options_.category_correlations.empty()) << "GpOptions.category_correlations empty";
  DADT_CHECK(options_.noise >= 0) << "GP noise must be >= 0, got " << options_.noise;
  for (double l : options_.length_scales) DADT_CHECK(l > 0) << "length-scale " << l;
  for (double v : options_.signal_variances) DADT_CHECK(v > 0) << "signal variance " << v;
  for (double r : options_.category_correlations) DADT_CHECK(r > 0 && r <= 1) << "rho " << r;
  DADT_CHECK(!options_.noise_multipliers.empty()) << "GpOptions.noise_multipliers is empty";
  for (double m : options_.noise_multipliers) DADT_CHECK(m >= 1) << "noise multiplier " << m;
  noise_ = options_.noise;
  length_scale_ = Middle(options_.length_scales);
  signal_variance_ = Middle(options_.signal_variances);
}

void GaussianProcess::set_noise(double noise) {
  DADT_CHECK(noise >= 0) << "GP noise must be >= 0, got " << noise;
  options_.noise = noise;
}

bool GaussianProcess::IsCategorical(int i) const {
  return i < static_cast<int>(options_.categorical.size()) && options_.categorical[i];
}

Eigen::MatrixXd GaussianProcess::Kernel(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                                        const Hyper& h) const {
  Eigen::MatrixXd d2 = Eigen::MatrixXd::Zero(a.rows(), b.rows());  // continuous |a - b|^2
  Eigen::MatrixXd mismatches = Eigen::MatrixXd::Zero(a.rows(), b.rows());
  for (int k = 0; k < a.cols(); ++k) {
    const Eigen::MatrixXd diff = a.col(k).replicate(1, b.rows()) -
                                 b.col(k).transpose().replicate(a.rows(), 1);
    if (IsCategorical(k)) {
      mismatches.array() += (diff.array().abs() > 1e-9).cast<double>();
    } else {
      d2.array() += diff.array().square();
    }
  }
  Eigen::ArrayXXd k;
  if (options_.kernel == KernelType::kRbf) {
    k = (d2.array() / (-2.0 * h.length * h.length)).exp();
  } else {  // Matern 5/2: (1 + sqrt5 r/l + 5 r^2 / (3 l^2)) * exp(-sqrt5 r/l)
    const Eigen::ArrayXXd s = std::sqrt(5.0) * d2.array().sqrt() / h.length;
    k = (1.0 + s + s.square() / 3.0) * (-s).exp();
  }
  if (h.rho < 1) k *= (mismatches.array() * std::log(h.rho)).exp();
  return h.variance * k.matrix();
}

bool GaussianProcess::Factorise(const Hyper& h, Eigen::LLT<Eigen::MatrixXd>* llt) const {
  Eigen::MatrixXd k = Kernel(x_, x_, h);
  k.diagonal().array() += h.noise / (y_scale_ * y_scale_);  // noise in units of y'
  // With noise ~0 and two nearly equal inputs K is singular in floating point; a little jitter
  // (relative to the signal variance) restores positive definiteness without changing the fit.
  for (double jitter : {0.0, 1e-10, 1e-8, 1e-6, 1e-4}) {
    Eigen::MatrixXd kj = k;
    kj.diagonal().array() += jitter * h.variance;
    llt->compute(kj);
    if (llt->info() == Eigen::Success) return true;
  }
  return false;
}

void GaussianProcess::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y) {
  DADT_CHECK_EQ(x.rows(), y.size());
  x_ = x;
  const Eigen::Index n = y.size();
  if (n == 0) {
    y_offset_ = 0;
    y_scale_ = 1;
    y_std_.resize(0);
    alpha_.resize(0);
    lml_ = 0;
    length_scale_ = Middle(options_.length_scales);
    signal_variance_ = Middle(options_.signal_variances);
    rho_ = 1;
    noise_ = options_.noise;
    return;
  }
  y_offset_ = y.mean();
  const double sd = std::sqrt((y.array() - y_offset_).square().mean());
  if (sd > 1e-12 * std::max(1.0, std::abs(y_offset_))) {
    y_scale_ = sd;
  } else {
    y_scale_ = std::abs(y_offset_) > 0 ? std::abs(y_offset_) : 1.0;
  }
  y_std_ = (y.array() - y_offset_) / y_scale_;

  // Grid search on the log marginal likelihood
  //   log p(y'|X) = -1/2 y'^T (K + n' I)^-1 y' - sum(log diag L) - n/2 log(2 pi),
  // with n' the noise variance on y'.
  bool any_categorical = false;
  for (int k = 0; k < x_.cols(); ++k) any_categorical |= IsCategorical(k);
  const std::vector<double> no_rho = {1.0};
  const std::vector<double>& rhos = any_categorical ? options_.category_correlations : no_rho;
  const std::vector<double>& multipliers =
      options_.noise > 0 ? options_.noise_multipliers : no_rho;  // 0 x anything is 0
  std::vector<Hyper> grid;
  for (double length : options_.length_scales) {
    for (double variance : options_.signal_variances) {
      for (double rho : rhos) {
        for (double multiplier : multipliers) {
          grid.push_back({length, variance, rho, options_.noise * multiplier});
        }
      }
    }
  }
  double best = -std::numeric_limits<double>::infinity();
  Eigen::LLT<Eigen::MatrixXd> llt;
  for (const Hyper& h : grid) {
    if (!Factorise(h, &llt)) continue;
    const Eigen::VectorXd a = llt.solve(y_std_);
    const double lml = -0.5 * y_std_.dot(a) - llt.matrixLLT().diagonal().array().log().sum() -
                       0.5 * n * std::log(2 * kPi);
    // A weak log-normal prior on the length-scale (median kPriorLength, one e-fold wide):
    // with a handful of samples the likelihood is flat in it and would otherwise pick the
    // shortest, which makes the model forget everything between the samples.
    const double z = std::log(h.length / kPriorLength);
    const double w = options_.noise > 0 ? std::log(h.noise / options_.noise) / kNoisePriorWidth : 0;
    const double score = lml - 0.5 * z * z - 0.5 * w * w;
    if (score > best) {
      best = score;
      lml_ = lml;
      length_scale_ = h.length;
      signal_variance_ = h.variance;
      rho_ = h.rho;
      noise_ = h.noise;
      llt_ = llt;
      alpha_ = a;
    }
  }
  DADT_CHECK(std::isfinite(best)) << "GP: no hyperparameter gave a positive-definite kernel";
}

void GaussianProcess::PredictBatch(const Eigen::MatrixXd& x, Eigen::VectorXd* mean,
                                   Eigen::VectorXd* std) const {
  const Eigen::Index m = x.rows();
  if (x_.rows() == 0) {
    *mean = Eigen::VectorXd::Constant(m, y_offset_);
    *std = Eigen::VectorXd::Constant(m, std::sqrt(signal_variance_) * y_scale_);
    return;
  }
  const Eigen::MatrixXd ks =
      Kernel(x, x_, {length_scale_, signal_variance_, rho_, noise_});  // m x n
  *mean = (ks * alpha_).array() * y_scale_ + y_offset_;
  // Posterior variance k(x,x) - k_s^T (K + n' I)^-1 k_s = s2 - |L^-1 k_s|^2.
  const Eigen::MatrixXd v = llt_.matrixL().solve(ks.transpose());  // n x m
  const Eigen::ArrayXd var =
      (signal_variance_ - v.colwise().squaredNorm().transpose().array()).cwiseMax(0.0);
  *std = var.sqrt() * y_scale_;
}

Prediction GaussianProcess::Predict(const Eigen::VectorXd& x) const {
  Eigen::VectorXd mean, std;
  PredictBatch(x.transpose(), &mean, &std);
  return {mean[0], std[0]};
}

}  // namespace autotune
}  // namespace dadt
