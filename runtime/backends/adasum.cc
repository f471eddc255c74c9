#include "runtime/backends/adasum.h"

#include <string>

#include "runtime/common/reduce.h"

namespace dadt {
namespace backends {
namespace {

// Reads and writes one element as a double.
template <typename T>
struct Plain {
  static double Load(T v) { return static_cast<double>(v); }
  static T Store(double v) { return static_cast<T>(v); }
};
struct Half {
  static double Load(uint16_t v) { return HalfToFloat(v); }
  static uint16_t Store(double v) { return FloatToHalf(static_cast<float>(v)); }
};
struct Bfloat16 {
  static double Load(uint16_t v) { return Bfloat16ToFloat(v); }
  static uint16_t Store(double v) { return FloatToBfloat16(static_cast<float>(v)); }
};

// 1 - a.b / (2 |x|^2), or 1 where x is zero.
double Coefficient(double dot, double norm_sq) { return norm_sq == 0.0 ? 1.0 : 1.0 - dot / (2.0 * norm_sq); }

template <typename T, typename Codec>
void CombineAll(T* mine, const T* theirs, const std::vector<int64_t>& counts, bool mine_is_a) {
  for (int64_t n : counts) {
    const T* a = mine_is_a ? mine : theirs;
    const T* b = mine_is_a ? theirs : mine;
    double dot = 0.0, aa = 0.0, bb = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = Codec::Load(a[i]), y = Codec::Load(b[i]);
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    const double ca = Coefficient(dot, aa), cb = Coefficient(dot, bb);
    // mine[i] is written after a[i] and b[i] are read: it may be either of them.
    for (int64_t i = 0; i < n; ++i) {
      mine[i] = Codec::Store(ca * Codec::Load(a[i]) + cb * Codec::Load(b[i]));
    }
    mine += n;
    theirs += n;
  }
}

// One swap of the whole buffer with `peer`: what it holds lands in `scratch`.
Status Swap(Backend* backend, void* data, void* scratch, int64_t bytes, int peer, uint32_t sequence) {
  return backend->Exchange({PeerBuffer{peer, data, bytes}}, {PeerBuffer{peer, scratch, bytes}},
                           sequence);
}

constexpr uint32_t kSequenceMask = 0x3fffffff;  // as the coordinator's point-to-point numbers

}  // namespace

bool AdasumSupports(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

void AdasumCombine(void* mine, const void* theirs, const std::vector<int64_t>& counts,
                   DataType dtype, bool mine_is_a) {
  switch (dtype) {
    case DataType::kFloat16:
      return CombineAll<uint16_t, Half>(static_cast<uint16_t*>(mine),
                                        static_cast<const uint16_t*>(theirs), counts, mine_is_a);
    case DataType::kBfloat16:
      return CombineAll<uint16_t, Bfloat16>(static_cast<uint16_t*>(mine),
                                            static_cast<const uint16_t*>(theirs), counts, mine_is_a);
    case DataType::kFloat32:
      return CombineAll<float, Plain<float>>(static_cast<float*>(mine),
                                             static_cast<const float*>(theirs), counts, mine_is_a);
    case DataType::kFloat64:
      return CombineAll<double, Plain<double>>(static_cast<double*>(mine),
                                               static_cast<const double*>(theirs), counts, mine_is_a);
    default: return;  // AdasumSupports() is checked before any rank gets here
  }
}

uint32_t AdasumSequences(int size) {
  uint32_t levels = 0;
  for (int level = 1; level < size; level <<= 1) ++levels;
  return levels + 2;  // the levels, the hand-over before them and the return after
}

Status AdasumAllreduce(Backend* backend, void* data, void* scratch,
                       const std::vector<int64_t>& counts, DataType dtype, int rank, int size,
                       uint32_t sequence) {
  if (!AdasumSupports(dtype)) {
    return InvalidArgument(std::string("Adasum needs float16, bfloat16, float32 or float64 "
                                       "tensors, not ") + DataTypeName(dtype));
  }
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  const int64_t bytes = total * static_cast<int64_t>(DataTypeSize(dtype));
  if (size <= 1 || bytes == 0) return Status::OK();
  int pow2 = 1;
  while (pow2 * 2 <= size) pow2 *= 2;
  auto seq = [sequence](uint32_t k) { return (sequence + k) & kSequenceMask; };
  const uint32_t last = AdasumSequences(size) - 1;
  if (rank >= pow2) {  // hand the tensor to rank - pow2, then take the result back
    const int partner = rank - pow2;
    DADT_RETURN_IF_ERROR(backend->Exchange({PeerBuffer{partner, data, bytes}}, {}, seq(0)));
    return backend->Exchange({}, {PeerBuffer{partner, data, bytes}}, seq(last));
  }
  const bool folds = rank + pow2 < size;
  if (folds) {
    DADT_RETURN_IF_ERROR(backend->Exchange({}, {PeerBuffer{rank + pow2, scratch, bytes}}, seq(0)));
    AdasumCombine(data, scratch, counts, dtype, /*mine_is_a=*/true);
  }
  uint32_t k = 1;
  for (int level = 1; level < pow2; level <<= 1, ++k) {
    const int partner = rank ^ level;
    DADT_RETURN_IF_ERROR(Swap(backend, data, scratch, bytes, partner, seq(k)));
    AdasumCombine(data, scratch, counts, dtype, /*mine_is_a=*/(rank & level) == 0);
  }
  if (folds) {
    DADT_RETURN_IF_ERROR(backend->Exchange({PeerBuffer{rank + pow2, data, bytes}}, {}, seq(last)));
  }
  return Status::OK();
}

}  // namespace backends
}  // namespace dadt
