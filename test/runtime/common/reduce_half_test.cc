// Tests for the half-precision conversions in runtime/common/reduce.h: known values (ties,
// subnormals, overflow, inf, NaN), every float16 bit pattern, a stride through every float, and
// the block path of ReduceBinary (F16C where available) against the scalar code. The float16
// reference is the compiler's own _Float16 conversion (libgcc, round-to-nearest-even), which is
// independent of the code under test.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/common/reduce.h"

namespace dadt {
namespace {

uint16_t RefFloatToHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, sizeof(u));
  return u;
}

float RefHalfToFloat(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, sizeof(h));
  return static_cast<float>(h);
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

bool IsHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(HalfConversionTest, KnownFloat16Values) {
  const float inf = std::numeric_limits<float>::infinity();
  const struct { float f; uint16_t h; } kCases[] = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff},
      {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {1e6f, 0x7c00}, {inf, 0x7c00}, {-inf, 0xfc00},
      {0x1p-14f, 0x0400},                        // smallest normal
      {0x1p-24f, 0x0001},                        // smallest subnormal
      {1023 * 0x1p-24f, 0x03ff},                 // largest subnormal
      {1023.5f * 0x1p-24f, 0x0400},              // tie -> even (rounds up into the normals)
      {0x1p-25f, 0x0000},                        // tie between 0 and 2^-24 -> 0 (even)
      {1.5f * 0x1p-25f, 0x0001}, {3 * 0x1p-25f, 0x0002},  // above tie; tie -> even (2)
      {-0x1p-26f, 0x8000},                       // underflow keeps the sign
      {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 3 * 0x1p-11f, 0x3c02},  // ties -> even
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(FloatToHalf(c.f), c.h) << c.f;
    if (c.h != 0x7c00 || c.f == inf) {
      EXPECT_EQ(FloatToHalf(HalfToFloat(c.h)), c.h);
    }
  }
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x83ff), -1023 * 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x7c00), inf);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));  // signalling NaN stays NaN
  EXPECT_TRUE(IsHalfNan(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsHalfNan(FloatToHalf(FromBits(0x7f800001))));  // tiny payload must not become inf
}

TEST(HalfConversionTest, AllFloat16ValuesMatchReference) {
  for (uint32_t u = 0; u <= 0xffff; ++u) {
    const uint16_t h = static_cast<uint16_t>(u);
    const float f = HalfToFloat(h);
    if (IsHalfNan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << u;
      continue;
    }
    ASSERT_EQ(f, RefHalfToFloat(h)) << std::hex << u;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << u;  // exact round trip
  }
}

TEST(HalfConversionTest, FloatToHalfMatchesReferenceAcrossFloatRange) {
  // A stride through every float bit pattern (both signs, subnormals, ties nearby), plus the exact
  // midpoints between neighbouring halves and one float ulp either side of each.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
    const float f = FromBits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), RefFloatToHalf(f)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double mid = (static_cast<double>(RefHalfToFloat(h)) + RefHalfToFloat(h + 1)) / 2;
    const float m = static_cast<float>(mid);  // exact: halves have 11 significant bits
    for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, 1e9f)}) {
      ASSERT_EQ(FloatToHalf(f), RefFloatToHalf(f)) << f;
      ASSERT_EQ(FloatToHalf(-f), RefFloatToHalf(-f)) << -f;
    }
  }
}

// The block path (F16C where the CPU has it) must give the same bits as the scalar conversions.
TEST(HalfConversionTest, ReduceBlockPathMatchesScalarForAllFloat16) {
  std::vector<uint16_t> all(65536), out(65536);
  for (uint32_t u = 0; u <= 0xffff; ++u) all[u] = static_cast<uint16_t>(u);
  ReduceBinary(out.data(), all.data(), all.data(), all.size(), DataType::kFloat16, ReduceOp::kMax);
  for (uint32_t u = 0; u <= 0xffff; ++u) {
    if (IsHalfNan(all[u])) {
      EXPECT_TRUE(IsHalfNan(out[u])) << std::hex << u;
    } else {
      ASSERT_EQ(out[u], all[u]) << std::hex << u;
    }
  }
  // Sums that land on ties, subnormals and overflow, through the block path.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  std::vector<uint16_t> a(4096), b(4096), c(4096);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint16_t>(bits(rng));
    b[i] = static_cast<uint16_t>(bits(rng));
  }
  ReduceBinary(c.data(), a.data(), b.data(), c.size(), DataType::kFloat16, ReduceOp::kSum);
  for (size_t i = 0; i < c.size(); ++i) {
    const uint16_t want = RefFloatToHalf(RefHalfToFloat(a[i]) + RefHalfToFloat(b[i]));
    if (IsHalfNan(want)) {
      EXPECT_TRUE(IsHalfNan(c[i]));
    } else {
      ASSERT_EQ(c[i], want) << std::hex << a[i] << " + " << b[i];
    }
  }
}

TEST(HalfConversionTest, KnownBfloat16Values) {
  const struct { uint32_t f; uint16_t b; } kCases[] = {
      {0x3f800000, 0x3f80},  // 1.0
      {0x3f808000, 0x3f80},  // tie -> even
      {0x3f818000, 0x3f82},  // tie -> even (up)
      {0x3f808001, 0x3f81},  // above tie
      {0x7f7fffff, 0x7f80},  // rounds to inf
      {0x7f800000, 0x7f80},  // inf
      {0xff800000, 0xff80},  // -inf
      {0x00000001, 0x0000},  // float subnormal rounds to 0
      {0x00018000, 0x0002},  // subnormal tie -> even
      {0x80000000, 0x8000},  // -0
  };
  for (const auto& c : kCases) EXPECT_EQ(FloatToBfloat16(FromBits(c.f)), c.b) << std::hex << c.f;
  EXPECT_EQ(FloatToBfloat16(FromBits(0x7f800001)) & 0x7fc0, 0x7fc0);  // NaN stays (quiet) NaN
  EXPECT_EQ(FloatToBfloat16(FromBits(0xffc00000)), 0xffc0);
  EXPECT_EQ(Bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bfloat16ToFloat(0x0001), FromBits(0x00010000));  // subnormal
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(0x7f81)));
  for (uint32_t u = 0; u <= 0xffff; ++u) {
    const uint16_t b = static_cast<uint16_t>(u);
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) continue;  // NaN
    ASSERT_EQ(FloatToBfloat16(Bfloat16ToFloat(b)), b) << std::hex << u;
  }
}

}  // namespace
}  // namespace dadt
