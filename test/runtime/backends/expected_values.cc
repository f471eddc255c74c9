#include "test/runtime/backends/expected_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dadt {
namespace testutil {

namespace {

uint16_t EncodeHalf(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (v == 0) return sign;
  int e;
  const double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) |
         static_cast<uint16_t>((m * 2 - 1) * 1024);
}

double DecodeHalf(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const double magnitude = exponent == 0 ? std::ldexp(h & 0x3ff, -24)
                                         : std::ldexp(1 + (h & 0x3ff) / 1024.0, exponent - 15);
  return (h & 0x8000) ? -magnitude : magnitude;
}

}  // namespace

void Put(void* buf, int64_t i, DataType dtype, double v) {
  switch (dtype) {
    case DataType::kUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kBool: static_cast<uint8_t*>(buf)[i] = v != 0; break;
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case DataType::kUint16: static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = EncodeHalf(v); break;
    case DataType::kBfloat16: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(bits >> 16);
      break;
    }
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
  }
}

double Get(const void* buf, int64_t i, DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
    case DataType::kBool: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(buf)[i];
    case DataType::kUint16: return static_cast<const uint16_t*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kFloat16: return DecodeHalf(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBfloat16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(buf)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
  }
  return NAN;
}

// Rank r's element i for a reduction with `op`. Sums/min/max of up to 4 ranks and products of
// {-1, 1/2, 1, 2} stay exact in every dtype; int32/int64 are scaled to use their high bits.
double Input(int rank, int64_t i, DataType dtype, ReduceOp op) {
  if (dtype == DataType::kBool) return (rank + i) % 3 == 0 ? 1 : 0;
  const bool is_unsigned = dtype == DataType::kUint8 || dtype == DataType::kUint16;
  const bool is_float = dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 ||
                        dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
  if (op == ReduceOp::kProduct) {
    static constexpr double kFloatFactors[] = {-1, 0.5, 2, 1};
    static constexpr double kSignedFactors[] = {-1, 1, 2};
    if (is_float) return kFloatFactors[(rank * 3 + i) % 4];
    if (is_unsigned) return 1 + (rank + i) % 2;
    return kSignedFactors[(rank * 2 + i) % 3];
  }
  const int k = static_cast<int>((rank * 7 + i * 3) % 5);  // 0..4
  if (is_unsigned) return k;
  if (is_float) return (k - 2) * 0.25;
  if (dtype == DataType::kInt32) return (k - 2) * 1048576.0;     // 2^20
  if (dtype == DataType::kInt64) return (k - 2) * 1099511627776.0;  // 2^40
  return k - 2;
}

double Expected(int size, int64_t i, DataType dtype, ReduceOp op) {
  double acc = Input(0, i, dtype, op);
  for (int r = 1; r < size; ++r) {
    const double v = Input(r, i, dtype, op);
    switch (op) {
      case ReduceOp::kSum: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      default: acc *= v; break;
    }
  }
  if (dtype == DataType::kBool && op == ReduceOp::kSum) return acc > 0 ? 1 : 0;  // logical or
  return acc;
}

std::vector<char> Buffer(int64_t count, DataType dtype) {
  return std::vector<char>(count * DataTypeSize(dtype) + 1);  // +1: never a null data()
}

std::string Describe(DataType dtype, ReduceOp op, int64_t count) {
  return std::string(DataTypeName(dtype)) + " " + ReduceOpName(op) + " count=" +
         std::to_string(count);
}

char Byte(int a, int b, int64_t k) {
  return static_cast<char>((a * 31 + b * 7 + k * 3 + 1) & 0xff);
}

std::vector<int64_t> EvenSplit(int64_t total, int size) {
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = total / size + (r < total % size ? 1 : 0);
  return counts;
}

}  // namespace testutil
}  // namespace dadt
