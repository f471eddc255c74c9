// Adasum's pairwise combination (runtime/backends/adasum.h) against its formula, written here in
// double: orthogonal vectors add, parallel ones average, a zero vector leaves the other, each
// tensor of a fused buffer has its own coefficients, and both orders of a pair give the same bits.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backends/adasum.h"
#include "runtime/common/reduce.h"

namespace dadt {
namespace backends {
namespace {

std::vector<double> Formula(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa), cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

TEST(AdasumCombineTest, OrthogonalAddParallelAverageZeroKeeps) {
  std::vector<double> a = {1, 0, 0}, b = {0, 2, 0};
  AdasumCombine(a.data(), b.data(), {3}, DataType::kFloat64, true);
  EXPECT_EQ(a, (std::vector<double>{1, 2, 0}));
  std::vector<double> c = {1, 2, 3}, d = {3, 6, 9};  // d = 3c: the mean, 2c
  AdasumCombine(c.data(), d.data(), {3}, DataType::kFloat64, true);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(c[i], 2.0 * (i + 1));
  std::vector<double> e = {0, 0}, f = {4, -5};
  AdasumCombine(e.data(), f.data(), {2}, DataType::kFloat64, true);
  EXPECT_EQ(e, f);
}

TEST(AdasumCombineTest, EachTensorOfAFusedBufferHasItsOwnCoefficients) {
  const std::vector<double> a1 = {1, 2, -1}, b1 = {0.5, -3, 2}, a2 = {4, 4}, b2 = {1, 7};
  std::vector<float> mine = {1, 2, -1, 4, 4}, theirs = {0.5f, -3, 2, 1, 7};
  AdasumCombine(mine.data(), theirs.data(), {3, 0, 2}, DataType::kFloat32, true);
  std::vector<double> want = Formula(a1, b1), want2 = Formula(a2, b2);
  want.insert(want.end(), want2.begin(), want2.end());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(mine[i], want[i], 1e-6) << i;
}

TEST(AdasumCombineTest, BothSidesOfAPairGetTheSameBits) {
  std::vector<float> lo(1000), hi(1000);
  for (int i = 0; i < 1000; ++i) lo[i] = std::sin(i * 0.37f), hi[i] = std::cos(i * 0.11f) * 3;
  std::vector<float> lo_result = lo, hi_result = hi;
  AdasumCombine(lo_result.data(), hi.data(), {1000}, DataType::kFloat32, /*mine_is_a=*/true);
  AdasumCombine(hi_result.data(), lo.data(), {1000}, DataType::kFloat32, /*mine_is_a=*/false);
  EXPECT_EQ(lo_result, hi_result);
}

TEST(AdasumCombineTest, HalfPrecisionIsCombinedInDouble) {
  // Values so small that their squares underflow in float16: the coefficients still come out as
  // at any other scale.
  std::vector<uint16_t> a = {FloatToHalf(6e-5f), FloatToHalf(0)}, b = {FloatToHalf(6e-5f), 0};
  AdasumCombine(a.data(), b.data(), {2}, DataType::kFloat16, true);  // parallel: the mean
  EXPECT_EQ(a[0], FloatToHalf(6e-5f));
  std::vector<uint16_t> c = {FloatToBfloat16(1), 0}, d = {0, FloatToBfloat16(2)};
  AdasumCombine(c.data(), d.data(), {2}, DataType::kBfloat16, true);  // orthogonal: the sum
  EXPECT_EQ(Bfloat16ToFloat(c[0]), 1.0f);
  EXPECT_EQ(Bfloat16ToFloat(c[1]), 2.0f);
}

TEST(AdasumCombineTest, SupportsFloatingPointOnly) {
  EXPECT_TRUE(AdasumSupports(DataType::kFloat16));
  EXPECT_TRUE(AdasumSupports(DataType::kBfloat16));
  EXPECT_TRUE(AdasumSupports(DataType::kFloat32));
  EXPECT_TRUE(AdasumSupports(DataType::kFloat64));
  EXPECT_FALSE(AdasumSupports(DataType::kInt32));
  EXPECT_FALSE(AdasumSupports(DataType::kBool));
}

}  // namespace
}  // namespace backends
}  // namespace dadt
