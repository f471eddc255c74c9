// Tests for runtime/common/reduce.h: known values for every dtype and op, wrap-around, NaN/inf,
// aliasing, the vectorised and tail paths, and ScaleBuffer. The half-precision conversions have
// their own file, reduce_half_test.cc.
#include "runtime/common/reduce.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dadt {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// Expected results of one op on the vectors a, b (in the order of kOps).
template <typename T>
struct Case {
  std::vector<T> a, b, sum, min, max, product;
};

template <typename T>
bool SameValue(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  }
  return x == y;
}

template <typename T>
void CheckCase(const Case<T>& c, DataType dtype) {
  const std::vector<T>* expected[] = {&c.sum, &c.min, &c.max, &c.product};
  for (int k = 0; k < 4; ++k) {
    std::vector<T> out(c.a.size());
    ReduceBinary(out.data(), c.a.data(), c.b.data(), out.size(), dtype, kOps[k]);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_TRUE(SameValue(out[i], (*expected[k])[i]))
          << DataTypeName(dtype) << " " << ReduceOpName(kOps[k]) << " [" << i << "]: got "
          << +out[i] << " want " << +(*expected[k])[i];
    }
  }
}

TEST(ReduceBinaryTest, Uint8WrapsModulo256) {
  CheckCase<uint8_t>({{0, 1, 200, 255}, {3, 1, 100, 1},
                      {3, 2, 44, 0}, {0, 1, 100, 1}, {3, 1, 200, 255}, {0, 1, 32, 255}},
                     DataType::kUint8);
}

TEST(ReduceBinaryTest, Int8WrapsModulo256) {
  CheckCase<int8_t>({{-128, 5, -3, 127}, {-1, -7, 4, 1},
                     {127, -2, 1, -128}, {-128, -7, -3, 1}, {-1, 5, 4, 127}, {-128, -35, -12, 127}},
                    DataType::kInt8);
}

TEST(ReduceBinaryTest, Int16WrapsModulo65536) {
  CheckCase<int16_t>({{-32768, 5, -3, 32767}, {-1, -7, 4, 1},
                      {32767, -2, 1, -32768}, {-32768, -7, -3, 1}, {-1, 5, 4, 32767},
                      {-32768, -35, -12, 32767}},
                     DataType::kInt16);
}

// 65535 * 65535 would overflow a signed int after promotion: the product is computed unsigned.
TEST(ReduceBinaryTest, Uint16WrapsModulo65536) {
  CheckCase<uint16_t>({{0, 1, 60000, 65535}, {3, 1, 10000, 65535},
                       {3, 2, 4464, 65534}, {0, 1, 10000, 65535}, {3, 1, 60000, 65535},
                       {0, 1, 17920, 1}},
                      DataType::kUint16);
}

TEST(ReduceBinaryTest, Int32) {
  const int32_t max = std::numeric_limits<int32_t>::max();
  const int32_t min = std::numeric_limits<int32_t>::min();
  CheckCase<int32_t>({{max, -5, 100000, 3}, {1, 7, 100000, -4},
                      {min, 2, 200000, -1}, {1, -5, 100000, -4}, {max, 7, 100000, 3},
                      {max, -35, 1410065408, -12}},
                     DataType::kInt32);
}

TEST(ReduceBinaryTest, Int64) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t min = std::numeric_limits<int64_t>::min();
  const int64_t big = int64_t{1} << 40;
  CheckCase<int64_t>({{max, -big, 3}, {1, 2 * big, -4},
                      {min, big, -1}, {1, -big, -4}, {max, 2 * big, 3}, {max, 0, -12}},
                     DataType::kInt64);
}

template <typename T>
Case<T> FloatCase() {
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // NaN in either position poisons Min/Max; inf - inf and inf * 0 are NaN.
  return {{1.5, -2, inf, nan, 1, inf, inf, 3},
          {2.25, 4, 1, 1, nan, -inf, 0, -inf},
          {3.75, 2, inf, nan, nan, nan, inf, -inf},
          {1.5, -2, 1, nan, nan, -inf, 0, -inf},
          {2.25, 4, inf, nan, nan, inf, inf, 3},
          {3.375, -8, inf, nan, nan, -inf, nan, -inf}};
}

TEST(ReduceBinaryTest, Float32) { CheckCase<float>(FloatCase<float>(), DataType::kFloat32); }
TEST(ReduceBinaryTest, Float64) { CheckCase<double>(FloatCase<double>(), DataType::kFloat64); }

TEST(ReduceBinaryTest, Float16RoundsToNearestEven) {
  // 1.0=3c00 2.0=4000 3.0=4200 0.5=3800 -2=c000 65504=7bff inf=7c00 2^-24=0001 2^-11=1000
  // 1+2^-10=3c01. 1 + 2^-11 is a tie -> 1.0 (even); (1+2^-10) + 2^-11 is a tie -> 3c02 (even).
  CheckCase<uint16_t>({{0x3c00, 0x3800, 0x7bff, 0x0001, 0x3c00, 0x3c01, 0x7c00},
                       {0x4000, 0xc000, 0x7bff, 0x0001, 0x1000, 0x1000, 0x3c00},
                       {0x4200, 0xbe00, 0x7c00, 0x0002, 0x3c00, 0x3c02, 0x7c00},
                       {0x3c00, 0xc000, 0x7bff, 0x0001, 0x1000, 0x1000, 0x3c00},
                       {0x4000, 0x3800, 0x7bff, 0x0001, 0x3c00, 0x3c01, 0x7c00},
                       {0x4000, 0xbc00, 0x7c00, 0x0000, 0x1000, 0x1001, 0x7c00}},
                      DataType::kFloat16);
}

TEST(ReduceBinaryTest, Bfloat16RoundsToNearestEven) {
  // 1.0=3f80 2.0=4000 3.0=4040 -2=c000 max=7f7f inf=7f80 2^-8=3b80 1+2^-7=3f81.
  CheckCase<uint16_t>({{0x3f80, 0x7f7f, 0x3f80, 0x3f81, 0x3f80},
                       {0x4000, 0x7f7f, 0x3b80, 0x3b80, 0xc000},
                       {0x4040, 0x7f80, 0x3f80, 0x3f82, 0xbf80},
                       {0x3f80, 0x7f7f, 0x3b80, 0x3b80, 0xc000},
                       {0x4000, 0x7f7f, 0x3f80, 0x3f81, 0x3f80},
                       {0x4000, 0x7f80, 0x3b80, 0x3b81, 0xc000}},
                      DataType::kBfloat16);
}

TEST(ReduceBinaryTest, BoolIsOrAndAnd) {
  // Any non-zero byte is true; results are canonical 0/1.
  CheckCase<uint8_t>({{0, 0, 1, 1, 2}, {0, 1, 0, 1, 7},
                      {0, 1, 1, 1, 1}, {0, 0, 0, 1, 1}, {0, 1, 1, 1, 1}, {0, 0, 0, 1, 1}},
                     DataType::kBool);
}

TEST(ReduceBinaryTest, HalfNanPropagates) {
  const uint16_t nan16 = 0x7e00, nanbf = 0x7fc0;
  for (ReduceOp op : kOps) {
    uint16_t a[2] = {nan16, 0x3c00}, b[2] = {0x3c00, nan16}, out[2];
    ReduceBinary(out, a, b, 2, DataType::kFloat16, op);
    EXPECT_TRUE(std::isnan(HalfToFloat(out[0])) && std::isnan(HalfToFloat(out[1])));
    uint16_t c[2] = {nanbf, 0x3f80}, d[2] = {0x3f80, nanbf};
    ReduceBinary(out, c, d, 2, DataType::kBfloat16, op);
    EXPECT_TRUE(std::isnan(Bfloat16ToFloat(out[0])) && std::isnan(Bfloat16ToFloat(out[1])));
  }
}

TEST(ReduceBinaryTest, CountZeroTouchesNothing) {
  float out = 7;
  ReduceBinary(&out, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(out, 7);
}

// Every length 0..70 (vector body + tail) and in place on either side, against a plain loop.
TEST(ReduceBinaryTest, Float32VectorAndTailPathsInPlace) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-100, 100);
  for (int n = 0; n <= 70; ++n) {
    std::vector<float> a(n), b(n);
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    for (ReduceOp op : kOps) {
      std::vector<float> want(n);
      for (int i = 0; i < n; ++i) {
        want[i] = op == ReduceOp::kSum   ? a[i] + b[i]
                  : op == ReduceOp::kMin ? std::fmin(a[i], b[i])
                  : op == ReduceOp::kMax ? std::fmax(a[i], b[i])
                                         : a[i] * b[i];
      }
      std::vector<float> x = a, y = b;
      ReduceBinary(x.data(), x.data(), b.data(), n, DataType::kFloat32, op);  // out == a
      ReduceBinary(y.data(), a.data(), y.data(), n, DataType::kFloat32, op);  // out == b
      EXPECT_EQ(x, want) << "n=" << n << " " << ReduceOpName(op);
      EXPECT_EQ(y, want) << "n=" << n << " " << ReduceOpName(op);
    }
  }
}

// Crosses several 512-element blocks and leaves a tail; out aliases a.
TEST(ReduceBinaryTest, HalfBlocksInPlace) {
  const int n = 1500;
  std::vector<uint16_t> a(n), b(n), want(n);
  for (int i = 0; i < n; ++i) {
    a[i] = FloatToHalf(static_cast<float>(i % 100) * 0.25f);
    b[i] = FloatToHalf(static_cast<float>(i % 7) - 3.0f);
    want[i] = FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(b[i]));
  }
  ReduceBinary(a.data(), a.data(), b.data(), n, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(a, want);
}

TEST(ReduceBinaryTest, IntegerInPlace) {
  std::vector<int64_t> a(1000), b(1000);
  for (int i = 0; i < 1000; ++i) {
    a[i] = i;
    b[i] = 3 * i - 1000;
  }
  ReduceBinary(b.data(), a.data(), b.data(), 1000, DataType::kInt64, ReduceOp::kMax);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(b[i], std::max<int64_t>(i, 3 * i - 1000));
}

// ---- ScaleBuffer ----

TEST(ScaleBufferTest, FloatTypes) {
  float f[3] = {1, -3, 0.5f};
  ASSERT_TRUE(ScaleBuffer(f, 3, DataType::kFloat32, 0.5).ok());
  EXPECT_EQ(f[0], 0.5f);
  EXPECT_EQ(f[1], -1.5f);
  EXPECT_EQ(f[2], 0.25f);
  double d[2] = {1, 3};
  ASSERT_TRUE(ScaleBuffer(d, 2, DataType::kFloat64, 1.0 / 3).ok());
  EXPECT_DOUBLE_EQ(d[1], 1.0);
  uint16_t h[2] = {0x4000, 0xc400}, b[2] = {0x4000, 0x3f80};  // {2, -4} and {2, 1}
  ASSERT_TRUE(ScaleBuffer(h, 2, DataType::kFloat16, 0.25).ok());
  EXPECT_EQ(h[0], 0x3800);  // 0.5
  EXPECT_EQ(h[1], 0xbc00);  // -1
  ASSERT_TRUE(ScaleBuffer(b, 2, DataType::kBfloat16, 0.5).ok());
  EXPECT_EQ(b[0], 0x3f80);  // 1
  EXPECT_EQ(b[1], 0x3f00);  // 0.5
}

TEST(ScaleBufferTest, IntegersTruncateTowardZeroAndSaturate) {
  int32_t i[4] = {7, -7, 1, 2000000000};
  ASSERT_TRUE(ScaleBuffer(i, 4, DataType::kInt32, 0.5).ok());
  EXPECT_EQ(i[0], 3);
  EXPECT_EQ(i[1], -3);
  EXPECT_EQ(i[2], 0);
  EXPECT_EQ(i[3], 1000000000);
  int8_t s[2] = {100, -100};
  ASSERT_TRUE(ScaleBuffer(s, 2, DataType::kInt8, 2.0).ok());
  EXPECT_EQ(s[0], 127);
  EXPECT_EQ(s[1], -128);
  uint8_t u[1] = {10};
  ASSERT_TRUE(ScaleBuffer(u, 1, DataType::kUint8, -1.0).ok());
  EXPECT_EQ(u[0], 0);
  int16_t h[2] = {20000, -20000};
  ASSERT_TRUE(ScaleBuffer(h, 2, DataType::kInt16, 2.0).ok());
  EXPECT_EQ(h[0], 32767);
  EXPECT_EQ(h[1], -32768);
  uint16_t uh[2] = {40000, 7};
  ASSERT_TRUE(ScaleBuffer(uh, 2, DataType::kUint16, 2.0).ok());
  EXPECT_EQ(uh[0], 65535);
  EXPECT_EQ(uh[1], 14);
  int64_t l[1] = {int64_t{1} << 40};
  ASSERT_TRUE(ScaleBuffer(l, 1, DataType::kInt64, 0.25).ok());
  EXPECT_EQ(l[0], int64_t{1} << 38);
}

TEST(ScaleBufferTest, BoolIsRefusedAndEmptyIsFine) {
  uint8_t b[1] = {1};
  EXPECT_EQ(ScaleBuffer(b, 1, DataType::kBool, 0.5).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ScaleBuffer(nullptr, 0, DataType::kFloat32, 0.5).ok());
}

TEST(ReduceBinaryDeathTest, AverageIsNotAKernel) {
  float a = 1, b = 2;
  EXPECT_DEATH(ReduceBinary(&a, &a, &b, 1, DataType::kFloat32, ReduceOp::kAverage),
               "unsupported op");
}

}  // namespace

TEST(DivideBufferTest, AverageIsADivisionNotAReciprocalMultiply) {
  std::vector<double> d = {5.0, 1.0, -7.0};
  ASSERT_TRUE(DivideBuffer(d.data(), 3, DataType::kFloat64, 3).ok());
  EXPECT_EQ(d[0], 5.0 / 3.0);  // 5 * (1/3) would be one ulp off
  EXPECT_EQ(d[2], -7.0 / 3.0);
  std::vector<int32_t> i = {6, 7, -7};
  ASSERT_TRUE(DivideBuffer(i.data(), 3, DataType::kInt32, 3).ok());
  EXPECT_EQ(i, (std::vector<int32_t>{2, 2, -2}));  // 6 * (1/3) would truncate to 1
  std::vector<float> f = {5.0f};
  ASSERT_TRUE(DivideBuffer(f.data(), 1, DataType::kFloat32, 3).ok());
  EXPECT_EQ(f[0], 5.0f / 3.0f);
  bool b = true;
  EXPECT_FALSE(DivideBuffer(&b, 1, DataType::kBool, 2).ok());
}

}  // namespace dadt
