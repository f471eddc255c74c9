#include "autotune/gaussian_process.h"

#include <cmath>

#include <gtest/gtest.h>

namespace dadt {
namespace autotune {
namespace {

GpOptions Exact(KernelType kernel = KernelType::kMatern52) {
  GpOptions o;
  o.kernel = kernel;
  o.noise = 1e-6;  // noise-free data: the posterior mean should interpolate
  return o;
}

double F1(double x) { return std::sin(2 * M_PI * x) + 0.5 * x; }
double F2(double x, double y) { return std::cos(3 * x) * std::exp(-y) + 2 * x * y; }

Eigen::VectorXd Point(double x) { return Eigen::VectorXd::Constant(1, x); }
Eigen::VectorXd Point(double x, double y) { return Eigen::Vector2d(x, y); }

class Gp1dTest : public ::testing::TestWithParam<KernelType> {};

TEST_P(Gp1dTest, InterpolatesAndKnowsWhereItHasNotLooked) {
  const int n = 9;
  Eigen::MatrixXd x(n, 1);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) {
    x(i, 0) = i / 8.0;
    y[i] = F1(x(i, 0));
  }
  GaussianProcess gp(Exact(GetParam()));
  gp.Fit(x, y);
  EXPECT_TRUE(std::isfinite(gp.log_marginal_likelihood()));
  for (int i = 0; i < n; ++i) {
    Prediction p = gp.Predict(Point(x(i, 0)));
    EXPECT_NEAR(p.mean, y[i], 1e-3) << "x=" << x(i, 0);
    EXPECT_LT(p.std, 1e-2) << "x=" << x(i, 0);
  }
  // Between samples the mean still tracks the function closely, and the model says so. (Whether
  // the std there exceeds the std at a sample is below the rounding of the RBF's ill-conditioned
  // kernel matrix here; UncertaintyGrowsAwayFromSamples checks that property.)
  for (double t : {0.0625, 0.3125, 0.5625, 0.8125}) {
    Prediction p = gp.Predict(Point(t));
    EXPECT_NEAR(p.mean, F1(t), 0.1) << "x=" << t;
    EXPECT_LT(p.std, 0.1) << "x=" << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Gp1dTest,
                         ::testing::Values(KernelType::kMatern52, KernelType::kRbf));

TEST(GaussianProcessTest, UncertaintyGrowsAwayFromSamples) {
  // Samples only in [0, 0.4]; walking towards 1 the std must rise monotonically.
  Eigen::MatrixXd x(5, 1);
  Eigen::VectorXd y(5);
  for (int i = 0; i < 5; ++i) {
    x(i, 0) = 0.1 * i;
    y[i] = F1(x(i, 0));
  }
  GaussianProcess gp(Exact());
  gp.Fit(x, y);
  double last = gp.Predict(Point(0.4)).std;
  EXPECT_LT(last, 1e-2);
  for (double t = 0.45; t <= 1.0; t += 0.05) {
    const double s = gp.Predict(Point(t)).std;
    EXPECT_GT(s, last) << "x=" << t;
    last = s;
  }
  // Far away the posterior is back near the prior: std comparable to the spread of y.
  EXPECT_GT(last, 0.5 * std::sqrt((y.array() - y.mean()).square().mean()));
}

TEST(GaussianProcessTest, Interpolates2d) {
  const int g = 6;
  Eigen::MatrixXd x(g * g, 2);
  Eigen::VectorXd y(g * g);
  for (int i = 0; i < g; ++i) {
    for (int j = 0; j < g; ++j) {
      x.row(i * g + j) << i / (g - 1.0), j / (g - 1.0);
      y[i * g + j] = F2(i / (g - 1.0), j / (g - 1.0));
    }
  }
  GaussianProcess gp(Exact());
  gp.Fit(x, y);
  for (int k = 0; k < g * g; ++k) {
    Prediction p = gp.Predict(x.row(k).transpose());
    EXPECT_NEAR(p.mean, y[k], 1e-3);
    EXPECT_LT(p.std, 1e-2);
  }
  for (auto [a, b] : {std::pair{0.1, 0.1}, {0.5, 0.5}, {0.7, 0.3}, {0.9, 0.9}}) {
    Prediction p = gp.Predict(Point(a, b));
    EXPECT_NEAR(p.mean, F2(a, b), 0.05) << a << "," << b;
    EXPECT_GT(p.std, gp.Predict(Point(0.6, 0.6)).std) << "a grid point is the most certain";
  }
  // Outside the sampled corner region the model is less sure than inside it.
  GaussianProcess corner(Exact());
  corner.Fit(x.topRows(g * 2), y.head(g * 2));  // rows i = 0, 1 only: x in [0, 0.2]
  EXPECT_LT(corner.Predict(Point(0.1, 0.5)).std, corner.Predict(Point(0.9, 0.5)).std);
}

TEST(GaussianProcessTest, NoiseSmoothsInsteadOfInterpolating) {
  // Horovod's noise level: the mean no longer passes through every (noisy) point, but keeps the
  // trend, and the uncertainty at a sample does not collapse to zero.
  Eigen::MatrixXd x(8, 1);
  Eigen::VectorXd y(8);
  for (int i = 0; i < 8; ++i) {
    x(i, 0) = i / 7.0;
    y[i] = 3 * x(i, 0) + ((i % 2) ? 0.3 : -0.3);
  }
  GaussianProcess gp(GpOptions{});  // noise 0.8
  gp.Fit(x, y);
  Prediction lo = gp.Predict(Point(0.0)), hi = gp.Predict(Point(1.0));
  EXPECT_GT(hi.mean - lo.mean, 1.5);
  EXPECT_GT(std::abs(gp.Predict(Point(1 / 7.0)).mean - y[1]), 0.05);
  EXPECT_GT(gp.Predict(Point(3 / 7.0)).std, 0.01);
}

TEST(GaussianProcessTest, FitsTheNoiseAboveTheFloor) {
  // A line plus +-1 alternating noise, sampled densely: with noise_multipliers the fit explains
  // the wiggle as noise (variance near 1) rather than bending through every point, and keeps the
  // floor on exact data.
  Eigen::MatrixXd x(16, 1);
  Eigen::VectorXd noisy(16), exact(16);
  for (int i = 0; i < 16; ++i) {
    x(i, 0) = i / 15.0;
    exact[i] = 10 * x(i, 0);
    noisy[i] = exact[i] + ((i % 2) ? 1.0 : -1.0);
  }
  GpOptions o;
  o.noise = 0.01;
  o.noise_multipliers = {1, 4, 16, 64, 256, 1024};
  GaussianProcess gp(o);
  gp.Fit(x, noisy);
  EXPECT_GE(gp.noise(), 0.16);
  EXPECT_LE(gp.noise(), 2.6);
  EXPECT_NEAR(gp.Predict(Point(0.5)).mean, 5.0, 0.5);
  gp.Fit(x, exact);
  EXPECT_DOUBLE_EQ(gp.noise(), 0.01);
}

TEST(GaussianProcessTest, PriorAndDegenerateTargets) {
  GaussianProcess gp(Exact());
  gp.Fit(Eigen::MatrixXd(0, 2), Eigen::VectorXd(0));
  Prediction prior = gp.Predict(Point(0.3, 0.3));
  EXPECT_EQ(prior.mean, 0);
  EXPECT_GT(prior.std, 0);

  // One sample, then identical samples: finite, centred on the value, certain at the sample.
  Eigen::MatrixXd x(1, 2);
  x << 0.5, 0.5;
  gp.Fit(x, Eigen::VectorXd::Constant(1, 7e9));
  EXPECT_NEAR(gp.Predict(Point(0.5, 0.5)).mean, 7e9, 1e3);
  Eigen::MatrixXd x3(3, 2);
  x3 << 0.1, 0.1, 0.5, 0.5, 0.5, 0.5;  // a duplicate input: K is singular without noise
  gp.Fit(x3, Eigen::VectorXd::Constant(3, 2.0));
  Prediction p = gp.Predict(Point(0.9, 0.2));
  EXPECT_NEAR(p.mean, 2.0, 1e-6);
  EXPECT_TRUE(std::isfinite(p.std));
}

TEST(GaussianProcessTest, BatchMatchesSinglePredictions) {
  Eigen::MatrixXd x = Eigen::MatrixXd::Random(10, 3).array().abs();
  Eigen::VectorXd y = x.rowwise().sum();
  GaussianProcess gp(GpOptions{});
  gp.Fit(x, y);
  Eigen::MatrixXd q = Eigen::MatrixXd::Random(7, 3).array().abs();
  Eigen::VectorXd mean, std;
  gp.PredictBatch(q, &mean, &std);
  for (int i = 0; i < 7; ++i) {
    Prediction p = gp.Predict(q.row(i).transpose());
    EXPECT_DOUBLE_EQ(p.mean, mean[i]);
    EXPECT_DOUBLE_EQ(p.std, std[i]);
  }
}

}  // namespace
}  // namespace autotune
}  // namespace dadt
