// ShmAllreduce (runtime/backends/shm/shm_allreduce.h) on its own, ranks as threads: results for
// every dtype and op across many chunks (tiny chunks, so slices and chunk edges fall everywhere),
// identical bits on every rank, two slots at once, set-up agreement and nothing left in /dev/shm,
// and the failures (a peer gone, a peer that never comes, a failed peer) that must end a wait.
#include "runtime/backends/shm/shm_allreduce.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/common/reduce.h"
#include "runtime/common/types.h"
#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace backends {
namespace shm {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Whether /dev/shm still holds a segment of the job whose token is in `store` under `prefix`.
bool AnySegmentLeft(testutil::InMemoryKeyValueStore& store, const std::string& prefix, int size) {
  auto token = store.Get(prefix + "shm/token/0", milliseconds(1000));
  EXPECT_TRUE(token.ok());
  for (int r = 0; r < size; ++r) {
    if (access(("/dev/shm/dadt-" + *token + "-" + std::to_string(r)).c_str(), F_OK) == 0) return true;
  }
  return false;
}

using Opened = StatusOr<std::unique_ptr<ShmAllreduce>>;

// Opens one ShmAllreduce per rank (threads, exchanging over one store under a prefix of their
// own), then runs body(rank, what Open gave) on every rank. enabled(rank) false: that rank has
// shared memory off.
void OpenRanks(int size, int64_t chunk_bytes, int slots, const std::function<void(int, Opened&)>& body,
               const std::function<bool(int)>& enabled = nullptr,
               testutil::InMemoryKeyValueStore* store_out = nullptr, std::string* prefix_out = nullptr) {
  static int job = 0;
  testutil::InMemoryKeyValueStore own;
  testutil::InMemoryKeyValueStore& store = store_out ? *store_out : own;
  const std::string prefix = "shmtest/" + std::to_string(job++) + "/";
  if (prefix_out) *prefix_out = prefix;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ShmAllreduceOptions o;
      o.rank = r;
      o.size = size;
      o.exchange = ExchangeThroughStore(&store, prefix, r, size, milliseconds(30000));
      o.slots = slots;
      o.chunk_bytes = chunk_bytes;
      o.enabled = !enabled || enabled(r);
      Opened shm = ShmAllreduce::Open(o);
      body(r, shm);
    });
  }
  for (auto& t : threads) t.join();
}

// OpenRanks where every rank must open: body(rank, shm).
void WithRanks(int size, int64_t chunk_bytes,
               const std::function<void(int, ShmAllreduce&)>& body, int slots = 2,
               testutil::InMemoryKeyValueStore* store_out = nullptr, std::string* prefix_out = nullptr) {
  OpenRanks(size, chunk_bytes, slots, [&](int r, Opened& shm) {
    ASSERT_TRUE(shm.ok()) << shm.status().ToString();
    body(r, **shm);
  }, nullptr, store_out, prefix_out);
}

template <typename T> DataType DataTypeOf();
template <> DataType DataTypeOf<float>() { return DataType::kFloat32; }
template <> DataType DataTypeOf<double>() { return DataType::kFloat64; }
template <> DataType DataTypeOf<int32_t>() { return DataType::kInt32; }
template <> DataType DataTypeOf<int64_t>() { return DataType::kInt64; }
template <> DataType DataTypeOf<uint8_t>() { return DataType::kUint8; }

template <typename T>
void CheckSum(int size, int64_t count, int64_t chunk_bytes) {
  std::vector<std::vector<T>> results(size);
  WithRanks(size, chunk_bytes, [&](int rank, ShmAllreduce& shm) {
    std::vector<T> v(count);
    for (int64_t i = 0; i < count; ++i) v[i] = static_cast<T>((i % 7) + rank);
    const Status s = shm.Allreduce(0, v.data(), count, DataTypeOf<T>(), ReduceOp::kSum,
                                   milliseconds(20000));
    ASSERT_TRUE(s.ok()) << s.ToString();
    results[rank] = v;
  });
  for (int64_t i = 0; i < count; ++i) {
    const T want = static_cast<T>(size * (i % 7) + size * (size - 1) / 2);
    ASSERT_EQ(results[0][i], want) << "element " << i;
  }
  for (int r = 1; r < size; ++r) {
    ASSERT_EQ(std::memcmp(results[r].data(), results[0].data(), count * sizeof(T)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

TEST(ShmAllreduceTest, SumAcrossManyChunksAndUnevenSlices) {
  CheckSum<float>(3, 10007, 4096);     // 10 chunks, the last partial; slices of 341/342 elements
  CheckSum<double>(4, 3, 4096);        // fewer elements than ranks: empty slices
  CheckSum<int32_t>(2, 4096 / 4 * 5, 4096);  // a whole number of chunks
  CheckSum<int64_t>(3, 1, 4096);
  CheckSum<uint8_t>(2, 9000, 4096);
}

TEST(ShmAllreduceTest, MinMaxProductAndHalfPrecision) {
  const int size = 3;
  const int64_t count = 5000;
  std::vector<std::vector<float>> mins(size), maxs(size), prods(size);
  WithRanks(size, 4096, [&](int rank, ShmAllreduce& shm) {
    std::vector<float> a(count, static_cast<float>(rank + 1)), b = a, c = a;
    ASSERT_TRUE(shm.Allreduce(0, a.data(), count, DataType::kFloat32, ReduceOp::kMin, milliseconds(20000)).ok());
    ASSERT_TRUE(shm.Allreduce(0, b.data(), count, DataType::kFloat32, ReduceOp::kMax, milliseconds(20000)).ok());
    ASSERT_TRUE(shm.Allreduce(0, c.data(), count, DataType::kFloat32, ReduceOp::kProduct, milliseconds(20000)).ok());
    mins[rank] = a;
    maxs[rank] = b;
    prods[rank] = c;
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(mins[r], std::vector<float>(count, 1.0f));
    EXPECT_EQ(maxs[r], std::vector<float>(count, 3.0f));
    EXPECT_EQ(prods[r], std::vector<float>(count, 6.0f));
  }
}

// The tensors of a fused response, reduced where they lie: pieces whose edges fall inside chunks
// and slices, one in place, one out of place, one this rank does not hold (zeros in, nothing out),
// an empty one; the epilogue (postscale, Average's division) gives the bits that the same kernels
// give when run over the whole result afterwards.
TEST(ShmAllreduceTest, PiecesAreGatheredAndScatteredWhereTheyLie) {
  const int size = 3;
  const std::vector<int64_t> counts = {1500, 0, 2333, 1, 4100, 777};  // 4096-byte chunks: 1024 floats
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const AllreduceEpilogue epilogue{0.5, size};
  std::vector<std::vector<float>> results(size);
  WithRanks(size, 4096, [&](int rank, ShmAllreduce& shm) {
    std::vector<float> whole(total), in(total), out(total, -7.0f);
    for (int64_t i = 0; i < total; ++i) in[i] = whole[i] = 0.25f * static_cast<float>((i % 13) + rank * 3);
    std::vector<AllreducePiece> pieces;
    int64_t at = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      AllreducePiece p{in.data() + at, out.data() + at, counts[k]};
      if (k == 2) p.out = in.data() + at;  // in place
      if (k == 3 && rank == 1) {           // a joined rank: zeros in, nothing written
        p.in = nullptr;
        p.out = nullptr;
        whole[at] = 0.0f;
      }
      pieces.push_back(p);
      at += counts[k];
    }
    ASSERT_TRUE(shm.AllreducePieces(0, pieces, DataType::kFloat32, ReduceOp::kSum, epilogue,
                                    milliseconds(20000)).ok());
    // The reference: the whole buffer reduced, then the same epilogue over all of it.
    ASSERT_TRUE(shm.Allreduce(1, whole.data(), total, DataType::kFloat32, ReduceOp::kSum, milliseconds(20000)).ok());
    ASSERT_TRUE(ScaleBuffer(whole.data(), total, DataType::kFloat32, epilogue.scale).ok());
    ASSERT_TRUE(DivideBuffer(whole.data(), total, DataType::kFloat32, epilogue.divisor).ok());
    at = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      const std::vector<float>& got = k == 2 ? in : out;
      for (int64_t i = at; i < at + counts[k]; ++i) {
        if (k == 3 && rank == 1) {
          ASSERT_EQ(out[i], -7.0f) << "a piece without an output was written";
        } else {
          ASSERT_EQ(got[i], whole[i]) << "piece " << k << " element " << i - at;
        }
      }
      if (k != 2) {
        for (int64_t i = at; i < at + counts[k]; ++i) ASSERT_EQ(in[i], 0.25f * static_cast<float>((i % 13) + rank * 3));
      }
      at += counts[k];
    }
    results[rank] = out;
  });
  for (int r = 1; r < size; ++r) {
    for (int64_t i = 0; i < total; ++i) {
      if (r == 1 && i == counts[0] + counts[1] + counts[2]) continue;  // rank 1's missing output
      ASSERT_EQ(results[r][i], results[0][i]) << "rank " << r << " element " << i;
    }
  }
}

// dear's two halves on one host. Uneven blocks (one empty, one longer than many chunks), chunks
// of 4096 bytes (341 floats of each of 3 blocks per chunk), and every way `out` may lie: its own
// buffer, this rank's block of the input (in place), and the input's start (the result overwrites
// blocks the later chunks no longer read).
TEST(ShmAllreduceTest, ReduceScatterGivesEachRankItsBlockSummedInEveryLayout) {
  const int size = 3;
  const std::vector<int64_t> counts = {2500, 0, 4001}, starts = {0, 2500, 2500};
  const int64_t total = 6501;
  auto value = [](int rank, int64_t i) { return 0.5f * static_cast<float>((i % 11) + 2 * rank); };
  for (int layout = 0; layout < 3; ++layout) {
    std::vector<std::vector<float>> got(size);
    WithRanks(size, 4096, [&](int rank, ShmAllreduce& shm) {
      std::vector<float> in(total), own(counts[rank] + 1, -3.0f);
      for (int64_t i = 0; i < total; ++i) in[i] = value(rank, i);
      float* out = layout == 0 ? own.data() : layout == 1 ? in.data() + starts[rank] : in.data();
      const Status s = shm.Reducescatter(0, in.data(), out, counts, DataType::kFloat32, ReduceOp::kSum,
                                         milliseconds(20000));
      ASSERT_TRUE(s.ok()) << s.ToString();
      got[rank].assign(out, out + counts[rank]);
      if (layout == 0) EXPECT_EQ(own.back(), -3.0f) << "wrote past its block";
    });
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < counts[r]; ++i) {
        const int64_t at = starts[r] + i;
        ASSERT_EQ(got[r][i], value(0, at) + value(1, at) + value(2, at))
            << "layout " << layout << " rank " << r << " element " << i;
      }
    }
  }
}

TEST(ShmAllreduceTest, AllgatherPutsEveryRankInPlaceInAnyLayout) {
  const int size = 3;
  const std::vector<int64_t> bytes = {9000, 0, 13};
  const int64_t total = 9013;
  for (bool in_place : {false, true}) {
    std::vector<std::vector<uint8_t>> got(size);
    WithRanks(size, 4096, [&](int rank, ShmAllreduce& shm) {
      std::vector<uint8_t> mine(bytes[rank]), out(total + 1, 0xEE);
      for (int64_t i = 0; i < bytes[rank]; ++i) mine[i] = static_cast<uint8_t>(i * 7 + rank);
      const int64_t start = rank == 2 ? 9000 : 0;
      if (in_place) std::copy(mine.begin(), mine.end(), out.begin() + start);
      const void* in = in_place ? static_cast<const void*>(out.data() + start) : mine.data();
      const Status s = shm.Allgather(0, in, out.data(), bytes, milliseconds(20000));
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(out.back(), 0xEE) << "wrote past the output";
      got[rank].assign(out.begin(), out.end() - 1);
    });
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < total; ++i) {
        const int owner = i < 9000 ? 0 : 2;
        const int64_t at = i < 9000 ? i : i - 9000;
        ASSERT_EQ(got[r][i], static_cast<uint8_t>(at * 7 + owner)) << "rank " << r << " byte " << i;
      }
    }
  }
}

// All three on one slot, back to back many times with ranks at different speeds: each relies on
// the others' use of the two buffers (the header's argument); a broken hand-over shows as a wrong
// value.
TEST(ShmAllreduceTest, TheThreeCollectivesShareASlotBackToBack) {
  const int size = 2;
  const int64_t n = 3000;  // 3 chunks of 1024 floats for the allreduce
  std::vector<int> bad(size, 0);
  WithRanks(size, 4096, [&](int rank, ShmAllreduce& shm) {
    for (int k = 0; k < 30; ++k) {
      if ((k + rank) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      std::vector<float> a(n, static_cast<float>(k + rank));
      ASSERT_TRUE(shm.Allreduce(0, a.data(), n, DataType::kFloat32, ReduceOp::kSum, milliseconds(20000)).ok());
      bad[rank] += a != std::vector<float>(n, static_cast<float>(2 * k + 1));
      std::vector<float> rs(n / 2);
      ASSERT_TRUE(shm.Reducescatter(0, a.data(), rs.data(), {n / 2, n / 2}, DataType::kFloat32, ReduceOp::kSum,
                                    milliseconds(20000)).ok());
      bad[rank] += rs != std::vector<float>(n / 2, static_cast<float>(4 * k + 2));
      std::vector<float> all(n);
      ASSERT_TRUE(shm.Allgather(0, rs.data(), all.data(), {n / 2 * 4, n / 2 * 4}, milliseconds(20000)).ok());
      bad[rank] += all != std::vector<float>(n, static_cast<float>(4 * k + 2));
    }
  });
  EXPECT_EQ(bad, std::vector<int>(size, 0));
}

TEST(ShmAllreduceTest, AnEpilogueTheDtypeCannotTakeIsRefusedBeforeAnyPeerWaits) {
  WithRanks(2, 4096, [&](int, ShmAllreduce& shm) {
    uint8_t flags[3] = {1, 0, 1};
    const Status s = shm.AllreducePieces(0, {AllreducePiece{flags, flags, 3}}, DataType::kBool, ReduceOp::kSum,
                                         AllreduceEpilogue{1.0, 2}, milliseconds(2000));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    // Nothing was published: the next collective on the slot still pairs up.
    float x = 1.0f;
    EXPECT_TRUE(shm.Allreduce(0, &x, 1, DataType::kFloat32, ReduceOp::kSum, milliseconds(20000)).ok());
    EXPECT_EQ(x, 2.0f);
  });
}

TEST(ShmAllreduceTest, TwoSlotsRunAtOnce) {
  const int size = 3;
  const int64_t count = 20000;
  std::vector<std::vector<float>> first(size), second(size);
  WithRanks(size, 4096, [&](int rank, ShmAllreduce& shm) {
    std::vector<float> a(count, 1.0f), b(count, static_cast<float>(rank));
    std::thread other([&] {
      for (int k = 0; k < 5; ++k) {
        ASSERT_TRUE(shm.Allreduce(1, b.data(), count, DataType::kFloat32, ReduceOp::kMax,
                                  milliseconds(20000)).ok());
      }
    });
    for (int k = 0; k < 5; ++k) {
      ASSERT_TRUE(shm.Allreduce(0, a.data(), count, DataType::kFloat32, ReduceOp::kSum,
                                milliseconds(20000)).ok());
    }
    other.join();
    first[rank] = a;
    second[rank] = b;
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(first[r], std::vector<float>(count, 243.0f));  // 1 * 3^5
    EXPECT_EQ(second[r], std::vector<float>(count, 2.0f));
  }
}

TEST(ShmAllreduceTest, LeavesNothingInDevShm) {
  testutil::InMemoryKeyValueStore store;
  std::string prefix;
  WithRanks(3, 4096, [&](int, ShmAllreduce& shm) {
    float x = 1;
    ASSERT_TRUE(shm.Allreduce(0, &x, 1, DataType::kFloat32, ReduceOp::kSum, milliseconds(20000)).ok());
  }, 2, &store, &prefix);
  EXPECT_FALSE(AnySegmentLeft(store, prefix, 3));  // unlinked once every rank had mapped them
}

TEST(ShmAllreduceTest, ARankWithSharedMemoryOffMakesEveryRankSayWhy) {
  std::vector<Status> results(3);
  OpenRanks(3, 4096, 2, [&](int r, Opened& shm) { results[r] = shm.status(); },
            [](int r) { return r != 1; });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kPreconditionFailed) << "rank " << r;
    EXPECT_NE(results[r].message().find("rank 1 has DADT_SHM_ALLREDUCE=0"), std::string::npos)
        << results[r].ToString();
  }
}

TEST(ShmAllreduceTest, APeerThatLeavesEndsTheWaitAtOnce) {
  Status waited;
  double seconds = 0;
  OpenRanks(2, 4096, 2, [&](int r, Opened& shm) {
    ASSERT_TRUE(shm.ok()) << shm.status().ToString();
    if (r == 1) {
      std::this_thread::sleep_for(milliseconds(200));
      shm->reset();  // gone without joining rank 0's allreduce
      return;
    }
    float x = 1;
    const auto t0 = Clock::now();
    waited = (*shm)->Allreduce(0, &x, 1, DataType::kFloat32, ReduceOp::kSum, milliseconds(60000));
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
  EXPECT_NE(waited.message().find("rank 1 closed"), std::string::npos) << waited.ToString();
  EXPECT_LT(seconds, 5);  // far below the 60 s timeout
}

// dear's halves end their waits as the allreduce does, and say which collective was cut short.
TEST(ShmAllreduceTest, APeerThatLeavesEndsAReduceScatterOrAllgather) {
  for (bool gather : {false, true}) {
    Status waited;
    OpenRanks(2, 4096, 2, [&](int r, Opened& shm) {
      ASSERT_TRUE(shm.ok()) << shm.status().ToString();
      if (r == 1) {
        std::this_thread::sleep_for(milliseconds(200));
        shm->reset();
        return;
      }
      std::vector<float> in(2000), out(2000);
      waited = gather ? (*shm)->Allgather(0, in.data(), out.data(), {4000, 4000}, milliseconds(60000))
                      : (*shm)->Reducescatter(0, in.data(), out.data(), {1000, 1000}, DataType::kFloat32,
                                              ReduceOp::kSum, milliseconds(60000));
    });
    EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
    EXPECT_NE(waited.message().find(gather ? "rank 1 closed its backend during a shared-memory all-gather"
                                           : "rank 1 closed its backend during a shared-memory reduce-scatter"),
              std::string::npos)
        << waited.ToString();
  }
}

TEST(ShmAllreduceTest, AFailedPeerAbortsAndASilentOneTimesOut) {
  for (bool abort : {true, false}) {
    Status waited;
    WithRanks(2, 4096, [&](int r, ShmAllreduce& shm) {
      if (r == 1) {
        std::this_thread::sleep_for(milliseconds(200));
        if (abort) shm.Abort();
        std::this_thread::sleep_for(milliseconds(600));  // alive, never joins
        return;
      }
      float x = 1;
      waited = shm.Allreduce(0, &x, 1, DataType::kFloat32, ReduceOp::kSum, milliseconds(500));
    });
    if (abort) {
      EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
      EXPECT_NE(waited.message().find("rank 1 failed"), std::string::npos) << waited.ToString();
    } else {
      EXPECT_EQ(waited.code(), StatusCode::kTimeout) << waited.ToString();
    }
  }
}

}  // namespace
}  // namespace shm
}  // namespace backends
}  // namespace dadt
