// The fusion copy, scale and cast kernels (see device_kernels.h).
//
// Batched copy: one launch moves up to kMaxCopiesPerLaunch spans into or out of the fusion buffer,
// so fusing many small gradients costs one kernel submission (cudaMemcpyAsync per tensor costs
// ~2-5 us of host time each). The spans are cut into equal chunks, one thread block per chunk
// (copy_plan.h), so the grid is as even as one large copy's. A chunk moves in 16-byte vectors when
// both its pointers are 16-byte aligned (PyTorch's allocator gives 512-byte blocks), in 4-byte
// words when both are 4-byte aligned (a float32 tensor after an odd-length one in the fusion
// buffer), and in bytes otherwise.
#include "runtime/backends/nccl/device_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/backends/nccl/copy_plan.h"

namespace dadt_cuda {
namespace {

// The element-wise kernels: grid-stride loops of at most kMaxBlocks blocks of kThreads threads.
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

__global__ void __launch_bounds__(kCopyThreads) CopyBatchKernel(CopyBatch b) {
  const int64_t chunk = blockIdx.x;
  const int i = SpanOfChunk(b.first_chunk, b.count, chunk);
  const CopyRange r = ChunkRange(b.bytes[i], chunk - b.first_chunk[i]);
  const char* src = b.src[i] ? static_cast<const char*>(b.src[i]) + r.begin : nullptr;
  char* dst = static_cast<char*>(b.dst[i]) + r.begin;
  const int64_t n = r.end - r.begin;
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  int64_t done = 0;
  if ((addresses & 15) == 0) {
    // A chunk is kCopyThreads * kCopyVectorsPerThread vectors at most: one pass, every load issued
    // before the first store.
    const int64_t vn = n / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    uint4 v[kCopyVectorsPerThread];
#pragma unroll
    for (int j = 0; j < kCopyVectorsPerThread; ++j) {
      const int64_t k = j * kCopyThreads + threadIdx.x;
      v[j] = (s && k < vn) ? s[k] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kCopyVectorsPerThread; ++j) {
      const int64_t k = j * kCopyThreads + threadIdx.x;
      if (k < vn) d[k] = v[j];
    }
    done = vn * 16;
  } else if ((addresses & 3) == 0) {
    const int64_t wn = n / 4;
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    for (int64_t k = threadIdx.x; k < wn; k += kCopyThreads) d[k] = s ? s[k] : 0u;
    done = wn * 4;
  }
  for (int64_t k = done + threadIdx.x; k < n; k += kCopyThreads) dst[k] = src ? src[k] : 0;
}

// Grid-stride loop over n elements: every kernel below is one of these with its own body.
#define DADT_FOR_EACH_ELEMENT(k, n)                                                            \
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < (n);       \
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Conversions that let one template serve float16 and bfloat16 (arithmetic happens in float).
__device__ float ToFloat(__half h) { return __half2float(h); }
__device__ float ToFloat(__nv_bfloat16 h) { return __bfloat162float(h); }
__device__ float ToFloat(float f) { return f; }
template <typename H> __device__ H FromFloat(float f);
template <> __device__ __half FromFloat<__half>(float f) { return __float2half_rn(f); }
template <> __device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float f) { return __float2bfloat16(f); }
template <> __device__ float FromFloat<float>(float f) { return f; }

// Element arithmetic. Scaling follows Horovod's GPU kernels, so that a Horovod script gets the same
// bits on dadt: a 16-bit float is multiplied by the factor rounded to its own type (one rounding
// of the exact product, as torch's `half_tensor * half_factor`), float32 by a float factor, and
// integers through double, saturating. The host (runtime/common/reduce.cc) scales 16-bit floats by
// the float factor instead, as Horovod's CPU path does. Division (Average) is the host's:
// 16-bit floats through float, integers as integers.
template <typename T> struct IntBounds;
template <> struct IntBounds<uint8_t> { static constexpr uint8_t lo = 0, hi = 255; };
template <> struct IntBounds<int8_t> { static constexpr int8_t lo = -128, hi = 127; };
template <> struct IntBounds<int16_t> { static constexpr int16_t lo = -32768, hi = 32767; };
template <> struct IntBounds<uint16_t> { static constexpr uint16_t lo = 0, hi = 65535; };
template <> struct IntBounds<int32_t> { static constexpr int32_t lo = -2147483647 - 1, hi = 2147483647; };
template <> struct IntBounds<int64_t> {
  static constexpr int64_t lo = -9223372036854775807LL - 1, hi = 9223372036854775807LL;
};

template <typename T> __device__ T Scaled(T x, double f) {
  const double v = static_cast<double>(x) * f;
  if (v != v) return 0;  // NaN
  if (v <= static_cast<double>(IntBounds<T>::lo)) return IntBounds<T>::lo;
  if (v >= static_cast<double>(IntBounds<T>::hi)) return IntBounds<T>::hi;
  return static_cast<T>(v);
}
__device__ float Scaled(float x, double f) { return x * static_cast<float>(f); }
__device__ double Scaled(double x, double f) { return x * f; }
__device__ __half Scaled(__half x, double f) {
  return FromFloat<__half>(ToFloat(x) * ToFloat(FromFloat<__half>(static_cast<float>(f))));
}
__device__ __nv_bfloat16 Scaled(__nv_bfloat16 x, double f) {
  return FromFloat<__nv_bfloat16>(ToFloat(x) *
                                  ToFloat(FromFloat<__nv_bfloat16>(static_cast<float>(f))));
}
template <typename T> __device__ T Divided(T x, int64_t d) { return x / static_cast<T>(d); }
__device__ __half Divided(__half x, int64_t d) {
  return FromFloat<__half>(ToFloat(x) / static_cast<float>(d));
}
__device__ __nv_bfloat16 Divided(__nv_bfloat16 x, int64_t d) {
  return FromFloat<__nv_bfloat16>(ToFloat(x) / static_cast<float>(d));
}

template <typename T>
__global__ void ScaleKernel(T* buf, int64_t n, double factor) {
  DADT_FOR_EACH_ELEMENT(k, n) buf[k] = Scaled(buf[k], factor);
}

template <typename T>
__global__ void DivideKernel(T* buf, int64_t n, int64_t divisor) {
  DADT_FOR_EACH_ELEMENT(k, n) buf[k] = Divided(buf[k], divisor);
}

template <typename In, typename Out>
__global__ void ConvertKernel(const In* in, Out* out, int64_t n) {
  DADT_FOR_EACH_ELEMENT(k, n) out[k] = FromFloat<Out>(ToFloat(in[k]));
}

unsigned Blocks(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

}  // namespace

cudaError_t LaunchCopyBatch(const CopyBatch& batch, cudaStream_t stream) {
  if (batch.count <= 0) return cudaSuccess;
  CopyBatch b = batch;
  const int64_t chunks = PlanCopyChunks(b.bytes, b.count, b.first_chunk);
  if (chunks == 0) return cudaSuccess;
  CopyBatchKernel<<<static_cast<unsigned>(chunks), kCopyThreads, 0, stream>>>(b);
  return cudaGetLastError();
}

// Calls f with `buf` as a pointer to the element type `type` (dadt's DataType numbering); false
// for a type the kernels do not handle (bool).
template <typename F>
bool WithElementType(void* buf, int type, F f) {
  switch (type) {
    case kScaleFloat16: f(static_cast<__half*>(buf)); return true;
    case kScaleBfloat16: f(static_cast<__nv_bfloat16*>(buf)); return true;
    case kScaleFloat32: f(static_cast<float*>(buf)); return true;
    case kScaleFloat64: f(static_cast<double*>(buf)); return true;
    case kScaleInt32: f(static_cast<int32_t*>(buf)); return true;
    case kScaleInt64: f(static_cast<int64_t*>(buf)); return true;
    case kScaleUint8: f(static_cast<uint8_t*>(buf)); return true;
    case kScaleInt8: f(static_cast<int8_t*>(buf)); return true;
    case kScaleInt16: f(static_cast<int16_t*>(buf)); return true;
    case kScaleUint16: f(static_cast<uint16_t*>(buf)); return true;
    default: return false;
  }
}

cudaError_t LaunchScale(void* buf, int64_t n, int type, double factor, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const bool known = WithElementType(buf, type, [&](auto* p) {
    ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(p, n, factor);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchDivide(void* buf, int64_t n, int type, int64_t d, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (d <= 0) return cudaErrorInvalidValue;
  const bool known = WithElementType(buf, type, [&](auto* p) {
    DivideKernel<<<Blocks(n), kThreads, 0, stream>>>(p, n, d);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchFloatToHalf(const float* in, void* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ConvertKernel<<<Blocks(n), kThreads, 0, stream>>>(in, static_cast<__half*>(out), n);
  return cudaGetLastError();
}

cudaError_t LaunchHalfToFloat(const void* in, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ConvertKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const __half*>(in), out, n);
  return cudaGetLastError();
}

}  // namespace dadt_cuda
