// How the batched fusion copy (device_kernels.cu) splits its spans among thread blocks. Plain C++
// that nvcc and the host compiler both build, so that the CPU tests (test/runtime/backends/nccl/
// copy_plan_test.cc) check the same split that the kernel runs on the GPU.
//
// Every span is cut into chunks of kCopyChunkBytes (the last one shorter); one thread block copies
// one chunk, whichever span it is in. Blocks are numbered across the spans in order, so
// first_chunk[i] is the first block of span i and first_chunk[count] is the grid size:
//
//   int64_t first[kMax + 1];
//   const int64_t blocks = PlanCopyChunks(bytes, count, first);   // host: the grid size
//   const int span = SpanOfChunk(first, count, blockIdx.x);       // device: my span
//   CopyRange r = ChunkRange(bytes[span], blockIdx.x - first[span]);
//
// A span of many megabytes and a span of a few bytes cost the same per byte, and a batch of many
// small gradients fills the GPU as well as one large tensor does.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define DADT_HOST_DEVICE __host__ __device__
#else
#define DADT_HOST_DEVICE
#endif

namespace dadt_cuda {

// 256 threads x 4 vectors of 16 bytes: each thread has four loads in flight before it stores.
constexpr int kCopyThreads = 256;
constexpr int kCopyVectorsPerThread = 4;
constexpr int64_t kCopyChunkBytes = int64_t{kCopyThreads} * kCopyVectorsPerThread * 16;

// Fills first_chunk[0..count] (count + 1 entries) and returns the total number of chunks.
DADT_HOST_DEVICE inline int64_t PlanCopyChunks(const int64_t* bytes, int count, int64_t* first_chunk) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    first_chunk[i] = total;
    total += bytes[i] > 0 ? (bytes[i] + kCopyChunkBytes - 1) / kCopyChunkBytes : 0;
  }
  first_chunk[count] = total;
  return total;
}

// The span holding `chunk` (0 <= chunk < first_chunk[count]): the last i with first_chunk[i] <=
// chunk, so spans with no chunks (0 bytes) are never chosen.
DADT_HOST_DEVICE inline int SpanOfChunk(const int64_t* first_chunk, int count, int64_t chunk) {
  int lo = 0, hi = count;  // first_chunk[lo] <= chunk < first_chunk[hi]
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (first_chunk[mid] <= chunk) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Bytes [begin, end) of a span of `span_bytes` bytes that its chunk number `k` covers.
struct CopyRange {
  int64_t begin;
  int64_t end;
};
DADT_HOST_DEVICE inline CopyRange ChunkRange(int64_t span_bytes, int64_t k) {
  const int64_t begin = k * kCopyChunkBytes;
  const int64_t end = begin + kCopyChunkBytes < span_bytes ? begin + kCopyChunkBytes : span_bytes;
  return {begin, end};
}

}  // namespace dadt_cuda
