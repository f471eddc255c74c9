// Device kernels of the CUDA build: the fusion buffer's batched copy, scaling and the fp16 cast.
//
// Compiled by nvcc (device_kernels.cu, through //tools/cuda:nvcc.bzl); this header is the only
// thing the C++ side sees, so it uses plain types and cudaStream_t/cudaError_t only. Every launch
// is asynchronous on `stream` and returns the launch error (cudaSuccess when queued).
//
//   dadt_cuda::CopyBatch batch = ...;   // up to kMaxCopiesPerLaunch spans
//   DADT_CUDA_CHECK("fusion copy", dadt_cuda::LaunchCopyBatch(batch, stream));
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dadt_cuda {

// One launch copies this many spans; longer lists are split into several launches (each ends in a
// partly filled last wave, so fewer is faster). The batch is passed by value as a kernel argument,
// about 8 KiB (CUDA 12.1 and later take up to 32 KiB on Volta and newer), so no host-to-device
// copy of it is needed.
constexpr int kMaxCopiesPerLaunch = 256;

struct CopyBatch {
  const void* src[kMaxCopiesPerLaunch];  // null: fill dst with zeros
  void* dst[kMaxCopiesPerLaunch];
  int64_t bytes[kMaxCopiesPerLaunch];
  int count;
  int64_t first_chunk[kMaxCopiesPerLaunch + 1];  // filled by LaunchCopyBatch (copy_plan.h)
};

// The spans are cut into chunks of kCopyChunkBytes, one thread block each (copy_plan.h), copied
// in 16-byte vectors, 4-byte words or bytes, as the chunk's two pointers are aligned.
cudaError_t LaunchCopyBatch(const CopyBatch& batch, cudaStream_t stream);

// Element types of the scale kernel (dadt's DataType values, as the core numbers them).
enum ScaleType : int { kScaleFloat16 = 4, kScaleBfloat16 = 5, kScaleFloat32 = 6, kScaleFloat64 = 7,
                       kScaleInt32 = 2, kScaleInt64 = 3, kScaleUint8 = 0, kScaleInt8 = 1,
                       kScaleInt16 = 9, kScaleUint16 = 10 };
cudaError_t LaunchScale(void* buf, int64_t count, int type, double factor, cudaStream_t stream);
// buf[i] /= divisor, exactly as the host's DivideBuffer (integer division for integer types; the
// 16-bit floats through float), for Average.
cudaError_t LaunchDivide(void* buf, int64_t count, int type, int64_t divisor, cudaStream_t stream);

// float32 -> float16 (round to nearest even) and back.
cudaError_t LaunchFloatToHalf(const float* in, void* out, int64_t count, cudaStream_t stream);
cudaError_t LaunchHalfToFloat(const void* in, float* out, int64_t count, cudaStream_t stream);

}  // namespace dadt_cuda
