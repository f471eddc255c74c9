// The fusion copy, scale and cast kernels (see device_kernels.h).
//
// Batched copy: one launch moves up to kMaxCopiesPerLaunch tensors into or out of the fusion
// buffer. blockIdx.y selects the span, so a launch costs one kernel submission however many small
// gradients are fused (cudaMemcpyAsync per tensor costs ~2-5 us of host time each); blockIdx.x
// strides over the span. 16-byte vector accesses reach the device's copy bandwidth when both
// pointers and the length are 16-byte aligned, which PyTorch's allocator (512-byte blocks) and the
// fusion layout give for float32/float16 tensors of even length; other spans fall back to bytes.
#include "runtime/backends/nccl/device_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace dadt_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerSpan = 1024;

__global__ void CopyBatchKernel(CopyBatch batch) {
  const int i = blockIdx.y;
  const char* src = static_cast<const char*>(batch.src[i]);
  char* dst = static_cast<char*>(batch.dst[i]);
  const int64_t n = batch.bytes[i];
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                         static_cast<uintptr_t>(n)) & 15) == 0;
  if (aligned) {
    const int64_t vn = n / 16;
    uint4* d = reinterpret_cast<uint4*>(dst);
    if (src) {
      const uint4* s = reinterpret_cast<const uint4*>(src);
      for (int64_t k = tid; k < vn; k += stride) d[k] = s[k];
    } else {
      for (int64_t k = tid; k < vn; k += stride) d[k] = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  for (int64_t k = tid; k < n; k += stride) dst[k] = src ? src[k] : 0;
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

template <typename T>
__global__ void ScaleKernel(T* buf, int64_t n, double factor) {
  DADT_FOR_EACH_ELEMENT(k, n) buf[k] = static_cast<T>(static_cast<double>(buf[k]) * factor);
}

template <typename H>
__global__ void ScaleHalfKernel(H* buf, int64_t n, float factor) {
  DADT_FOR_EACH_ELEMENT(k, n) buf[k] = FromFloat<H>(ToFloat(buf[k]) * factor);
}

template <typename T>
__global__ void DivideKernel(T* buf, int64_t n, T divisor) {
  DADT_FOR_EACH_ELEMENT(k, n) buf[k] = buf[k] / divisor;
}

// 16-bit floats divide in float and round once, as the host does.
template <typename H>
__global__ void DivideHalfKernel(H* buf, int64_t n, float divisor) {
  DADT_FOR_EACH_ELEMENT(k, n) buf[k] = FromFloat<H>(ToFloat(buf[k]) / divisor);
}

template <typename In, typename Out>
__global__ void ConvertKernel(const In* in, Out* out, int64_t n) {
  DADT_FOR_EACH_ELEMENT(k, n) out[k] = FromFloat<Out>(ToFloat(in[k]));
}

unsigned Blocks(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocksPerSpan ? kMaxBlocksPerSpan : b));
}

}  // namespace

cudaError_t LaunchCopyBatch(const CopyBatch& batch, cudaStream_t stream) {
  if (batch.count <= 0) return cudaSuccess;
  int64_t longest = 0;
  for (int i = 0; i < batch.count; ++i) longest = batch.bytes[i] > longest ? batch.bytes[i] : longest;
  if (longest == 0) return cudaSuccess;
  dim3 grid(Blocks(longest / 16 + 1), static_cast<unsigned>(batch.count));
  CopyBatchKernel<<<grid, kThreads, 0, stream>>>(batch);
  return cudaGetLastError();
}

cudaError_t LaunchScale(void* buf, int64_t n, int type, double factor, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned blocks = Blocks(n);
  switch (type) {
    case kScaleFloat16:
      ScaleHalfKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(buf), n,
                                                       static_cast<float>(factor));
      break;
    case kScaleBfloat16:
      ScaleHalfKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(buf), n,
                                                       static_cast<float>(factor));
      break;
    case kScaleFloat32: ScaleKernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(buf), n, factor); break;
    case kScaleFloat64: ScaleKernel<<<blocks, kThreads, 0, stream>>>(static_cast<double*>(buf), n, factor); break;
    case kScaleInt32: ScaleKernel<<<blocks, kThreads, 0, stream>>>(static_cast<int32_t*>(buf), n, factor); break;
    case kScaleInt64: ScaleKernel<<<blocks, kThreads, 0, stream>>>(static_cast<int64_t*>(buf), n, factor); break;
    case kScaleUint8: ScaleKernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint8_t*>(buf), n, factor); break;
    case kScaleInt8: ScaleKernel<<<blocks, kThreads, 0, stream>>>(static_cast<int8_t*>(buf), n, factor); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchDivide(void* buf, int64_t n, int type, int64_t d, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (d <= 0) return cudaErrorInvalidValue;
  const unsigned blocks = Blocks(n);
  switch (type) {
    case kScaleFloat16:
      DivideHalfKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(buf), n, static_cast<float>(d));
      break;
    case kScaleBfloat16:
      DivideHalfKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(buf), n, static_cast<float>(d));
      break;
    case kScaleFloat32: DivideKernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(buf), n, static_cast<float>(d)); break;
    case kScaleFloat64: DivideKernel<<<blocks, kThreads, 0, stream>>>(static_cast<double*>(buf), n, static_cast<double>(d)); break;
    case kScaleInt32: DivideKernel<<<blocks, kThreads, 0, stream>>>(static_cast<int32_t*>(buf), n, static_cast<int32_t>(d)); break;
    case kScaleInt64: DivideKernel<<<blocks, kThreads, 0, stream>>>(static_cast<int64_t*>(buf), n, d); break;
    case kScaleUint8: DivideKernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint8_t*>(buf), n, static_cast<uint8_t>(d)); break;
    case kScaleInt8: DivideKernel<<<blocks, kThreads, 0, stream>>>(static_cast<int8_t*>(buf), n, static_cast<int8_t>(d)); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
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
