// The batched fusion copy's plan (runtime/backends/nccl/copy_plan.h), run on the CPU: every block
// of the grid copies its chunk as the kernel would, and every byte of every span is copied exactly
// once, whatever the mix of span sizes (empty, tiny, one chunk exactly, many chunks).
#include "runtime/backends/nccl/copy_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dadt_cuda {
namespace {

// Runs the kernel's indexing on the host: returns, per span, how often each byte was written.
std::vector<std::vector<int>> CoverageOf(const std::vector<int64_t>& bytes) {
  const int count = static_cast<int>(bytes.size());
  std::vector<int64_t> first(count + 1);
  const int64_t blocks = PlanCopyChunks(bytes.data(), count, first.data());
  std::vector<std::vector<int>> hits(count);
  for (int i = 0; i < count; ++i) hits[i].assign(bytes[i], 0);
  for (int64_t block = 0; block < blocks; ++block) {
    const int span = SpanOfChunk(first.data(), count, block);
    EXPECT_GT(bytes[span], 0) << "block " << block << " landed on an empty span";
    const CopyRange r = ChunkRange(bytes[span], block - first[span]);
    EXPECT_LT(r.begin, r.end);
    EXPECT_LE(r.end - r.begin, kCopyChunkBytes);
    EXPECT_EQ(r.begin % 16, 0) << "a chunk must keep its span's 16-byte alignment";
    for (int64_t k = r.begin; k < r.end; ++k) ++hits[span][k];
  }
  return hits;
}

void ExpectEachByteOnce(const std::vector<int64_t>& bytes) {
  auto hits = CoverageOf(bytes);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int64_t k = 0; k < bytes[i]; ++k) {
      ASSERT_EQ(hits[i][k], 1) << "span " << i << " (" << bytes[i] << " bytes), byte " << k;
    }
  }
}

TEST(CopyPlan, ChunkBoundariesAndEmptySpans) {
  const int64_t c = kCopyChunkBytes;
  ExpectEachByteOnce({0, 1, 0, c - 1, c, c + 1, 0, 3 * c, 0});
  ExpectEachByteOnce({0, 0, 0});
  ExpectEachByteOnce({c});
}

TEST(CopyPlan, GridSizeIsTheSumOfEverySpansChunks) {
  const int64_t c = kCopyChunkBytes;
  std::vector<int64_t> bytes = {5, 0, c, c + 1, 10 * c};
  std::vector<int64_t> first(bytes.size() + 1);
  EXPECT_EQ(PlanCopyChunks(bytes.data(), static_cast<int>(bytes.size()), first.data()), 1 + 0 + 1 + 2 + 10);
  EXPECT_EQ(first, (std::vector<int64_t>{0, 1, 1, 2, 4, 14}));
  // Span 1 is empty: the chunk after span 0 belongs to span 2.
  EXPECT_EQ(SpanOfChunk(first.data(), 5, 1), 2);
  EXPECT_EQ(SpanOfChunk(first.data(), 5, 13), 4);
}

TEST(CopyPlan, RandomMixesOfSizesAsAFusionBatchHasThem) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> count(1, 256);  // a launch's spans (kMaxCopiesPerLaunch)
  std::uniform_int_distribution<int64_t> size(0, 5 * kCopyChunkBytes);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> bytes(count(rng));
    for (int64_t& b : bytes) b = trial % 5 == 0 ? size(rng) / 1000 : size(rng);
    ExpectEachByteOnce(bytes);
  }
}

}  // namespace
}  // namespace dadt_cuda
