// Backend conformance suite: written once against the Backend interface, instantiated per backend
// and world size (as TensorPipe's TransportTest is per transport). Ranks are threads; each thread
// creates its own Backend through BackendRegistry (see rank_threads.h).
//
// Expected values come from expected_values.h: exact in every dtype, independent of the reduction
// order, and folded in double by the test itself, never with the kernels under test.
//
// To cover a new backend, add a <backend>_conformance_test.cc that instantiates the suite
// (gloo_conformance_test.cc: ranks as threads; mpi_conformance_test.cc: ranks as mpirun processes).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <numeric>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backends/adasum.h"
#include "runtime/backends/backend.h"
#include "test/runtime/backends/expected_values.h"
#include "test/runtime/backends/backend_conformance.h"
#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace backends {
namespace conformance {
namespace {

using testutil::Buffer;
using testutil::Byte;
using testutil::Describe;
using testutil::EvenSplit;
using testutil::Expected;
using testutil::Get;
using testutil::Input;
using testutil::Put;
using testutil::RunRanks;

constexpr DataType kAllTypes[] = {DataType::kUint8,   DataType::kInt8,    DataType::kInt16,
                                  DataType::kUint16,  DataType::kInt32,   DataType::kInt64,
                                  DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                  DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

TEST_P(BackendConformanceTest, NameIsUpperCase) {
  Run([](int, Backend& b) {
    const std::string name = b.Name();
    EXPECT_FALSE(name.empty());
    for (char c : name) EXPECT_TRUE(c >= 'A' && c <= 'Z') << name;
  });
}

TEST_P(BackendConformanceTest, AllreduceEveryDtypeOpAndCount) {
  const int n = size();
  Run([n](int rank, Backend& b) {
    for (DataType dtype : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (int64_t count : {0, 1, 7, 1000}) {
          std::vector<char> buf = Buffer(count, dtype);
          for (int64_t i = 0; i < count; ++i) Put(buf.data(), i, dtype, Input(rank, i, dtype, op));
          EXPECT_OK(b.Allreduce(buf.data(), count, dtype, op));
          int bad = 0;
          for (int64_t i = 0; i < count && bad < 3; ++i) {
            const double got = Get(buf.data(), i, dtype), want = Expected(n, i, dtype, op);
            if (got != want) {
              ++bad;
              ADD_FAILURE() << "rank " << rank << " " << Describe(dtype, op, count) << " [" << i
                            << "]: got " << got << " want " << want;
            }
          }
        }
      }
    }
  });
}

// Rank `rank`'s float32 inputs 0..count-1 for `op`.
std::vector<float> FloatInputs(int rank, int64_t count, ReduceOp op) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) {
    v[i] = static_cast<float>(Input(rank, i, DataType::kFloat32, op));
  }
  return v;
}

// How many of `got` (elements offset.. of the reduction over n ranks) differ from the expected.
int64_t CountWrongFloats(const std::vector<float>& got, int64_t offset, int n, ReduceOp op) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += got[i] != static_cast<float>(Expected(n, offset + i, DataType::kFloat32, op));
  }
  return bad;
}

TEST_P(BackendConformanceTest, AllreduceLargeFloat32) {
  const int n = size();
  const int64_t count = 1 << 20;  // several pipeline segments per rank
  Run([n, count](int rank, Backend& b) {
    for (ReduceOp op : kAllOps) {
      std::vector<float> buf = FloatInputs(rank, count, op);
      EXPECT_OK(b.Allreduce(buf.data(), count, DataType::kFloat32, op));
      EXPECT_EQ(CountWrongFloats(buf, 0, n, op), 0) << "rank " << rank << " " << ReduceOpName(op);
    }
  });
}

// Over 1 MiB in all, so that the MPI backend starts it with its barrier (mpi_backend.h), with
// uneven counts.
TEST_P(BackendConformanceTest, ReducescatterLargeFloat32) {
  const int n = size();
  std::vector<int64_t> counts = EvenSplit(int64_t{1} << 19, n);
  counts[n - 1] += 777;
  Run([n, &counts](int rank, Backend& b) {
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
    for (ReduceOp op : kAllOps) {
      std::vector<float> in = FloatInputs(rank, total, op), out(counts[rank]);
      EXPECT_OK(b.Reducescatter(in.data(), out.data(), counts, DataType::kFloat32, op));
      EXPECT_EQ(CountWrongFloats(out, offset, n, op), 0)
          << "rank " << rank << " " << ReduceOpName(op);
    }
  });
}

TEST_P(BackendConformanceTest, AllgathervUnevenAndEmptyContributions) {
  const int n = size();
  std::vector<std::vector<int64_t>> patterns;
  patterns.push_back(std::vector<int64_t>(n, 0));  // nobody sends anything
  std::vector<int64_t> uneven(n), first_empty(n), only_last(n, 0), large(n), bulk(n);
  for (int r = 0; r < n; ++r) {
    uneven[r] = (r * 37 + 5) % 11;
    first_empty[r] = r == 0 ? 0 : r * 3 + 1;
    large[r] = 100000 + r * 1001;
    bulk[r] = (int64_t{3} << 20) / n + r * 4099;  // over 1 MiB in all: MPI's aligned start
  }
  only_last[n - 1] = 17;
  for (const auto& p : {uneven, first_empty, only_last, large, bulk}) patterns.push_back(p);

  Run([&patterns](int rank, Backend& b) {
    for (const auto& bytes : patterns) {
      const int64_t total = std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
      const int64_t offset = std::accumulate(bytes.begin(), bytes.begin() + rank, int64_t{0});
      for (bool in_place : {false, true}) {
        std::vector<char> out(total + 1, 0x5a), in(bytes[rank] + 1);
        char* src = in_place ? out.data() + offset : in.data();
        for (int64_t k = 0; k < bytes[rank]; ++k) src[k] = Byte(rank, 0, k);
        EXPECT_OK(b.Allgatherv(src, out.data(), bytes));
        int64_t pos = 0, bad = 0;
        for (size_t r = 0; r < bytes.size(); ++r) {
          for (int64_t k = 0; k < bytes[r]; ++k) bad += out[pos++] != Byte(r, 0, k);
        }
        EXPECT_EQ(bad, 0) << "rank " << rank << " total " << total << " in_place " << in_place;
      }
    }
  });
}

TEST_P(BackendConformanceTest, BroadcastFromEveryRoot) {
  const int n = size();
  Run([n](int rank, Backend& b) {
    for (int root = 0; root < n; ++root) {
      for (int64_t bytes : {0, 1, 4097, 300000}) {
        std::vector<char> buf(bytes + 1);
        for (int64_t k = 0; k < bytes; ++k) buf[k] = rank == root ? Byte(root, 1, k) : 0;
        EXPECT_OK(b.Broadcast(buf.data(), bytes, root));
        int64_t bad = 0;
        for (int64_t k = 0; k < bytes; ++k) bad += buf[k] != Byte(root, 1, k);
        EXPECT_EQ(bad, 0) << "rank " << rank << " root " << root << " bytes " << bytes;
      }
    }
  });
}

TEST_P(BackendConformanceTest, AlltoallvUnevenSplits) {
  const int n = size();
  // bytes[s][d]: what rank s sends rank d. Some pairs send nothing; one pattern is empty.
  using Matrix = std::vector<std::vector<int64_t>>;
  std::vector<Matrix> patterns;
  Matrix uneven(n, std::vector<int64_t>(n)), large(n, std::vector<int64_t>(n));
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      uneven[s][d] = (s * 3 + d * 5 + 1) % 7 * 13;
      large[s][d] = 50000 + 977 * s + 101 * d;
    }
  }
  patterns = {Matrix(n, std::vector<int64_t>(n, 0)), uneven, large};

  Run([n, &patterns](int rank, Backend& b) {
    for (const Matrix& m : patterns) {
      std::vector<int64_t> send(n), recv(n);
      for (int j = 0; j < n; ++j) {
        send[j] = m[rank][j];
        recv[j] = m[j][rank];
      }
      std::vector<char> in(std::accumulate(send.begin(), send.end(), int64_t{0}) + 1);
      std::vector<char> out(std::accumulate(recv.begin(), recv.end(), int64_t{0}) + 1, 0x5a);
      int64_t pos = 0;
      for (int j = 0; j < n; ++j) {
        for (int64_t k = 0; k < send[j]; ++k) in[pos++] = Byte(rank, j, k);
      }
      EXPECT_OK(b.Alltoallv(in.data(), send, out.data(), recv));
      int64_t bad = 0;
      pos = 0;
      for (int j = 0; j < n; ++j) {
        for (int64_t k = 0; k < recv[j]; ++k) bad += out[pos++] != Byte(j, rank, k);
      }
      EXPECT_EQ(bad, 0) << "rank " << rank;
    }
  });
}

// Point to point: every rank sends to its two ring neighbours and receives from them (several
// transfers in one call, uneven sizes, one of them empty), then only pairs (0, 1), (2, 3), ...
// swap while the others do nothing, with a large message; sequences as the coordinator numbers
// them, one per call.
TEST_P(BackendConformanceTest, ExchangeRingAndPairs) {
  const int n = size();
  if (n < 2) GTEST_SKIP() << "point to point needs a peer";
  Run([n](int rank, Backend& b) {
    auto bytes = [](int from, int to) { return from == 0 && to == 1 ? 0 : 1000 + 37 * from + 11 * to; };
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    std::vector<int> peers = {right};
    if (left != right) peers.push_back(left);
    std::vector<std::vector<char>> out(peers.size()), in(peers.size());
    std::vector<PeerBuffer> sends, recvs;
    for (size_t i = 0; i < peers.size(); ++i) {
      out[i].resize(bytes(rank, peers[i]));
      for (size_t k = 0; k < out[i].size(); ++k) out[i][k] = Byte(rank, peers[i], k);
      in[i].assign(bytes(peers[i], rank), 0x5a);
      sends.push_back({peers[i], out[i].data(), static_cast<int64_t>(out[i].size())});
      recvs.push_back({peers[i], in[i].data(), static_cast<int64_t>(in[i].size())});
    }
    EXPECT_OK(b.Exchange(sends, recvs, /*sequence=*/0));
    for (size_t i = 0; i < peers.size(); ++i) {
      int64_t bad = 0;
      for (size_t k = 0; k < in[i].size(); ++k) bad += in[i][k] != Byte(peers[i], rank, k);
      EXPECT_EQ(bad, 0) << "rank " << rank << " from " << peers[i];
    }
    const int partner = rank ^ 1;
    std::vector<float> mine(1 << 20, static_cast<float>(rank)), theirs(1 << 20, -1.0f);
    if (partner < n) {
      const int64_t size_bytes = static_cast<int64_t>(mine.size() * sizeof(float));
      EXPECT_OK(b.Exchange({{partner, mine.data(), size_bytes}}, {{partner, theirs.data(), size_bytes}},
                           /*sequence=*/1));
      EXPECT_EQ(theirs.front(), static_cast<float>(partner));
      EXPECT_EQ(theirs.back(), static_cast<float>(partner));
    }
    EXPECT_OK(b.Barrier());
  });
}

// Adasum over the engine's point to point (runtime/backends/adasum.h): every rank ends with the
// binary tree of the pairwise formula (the ranks past the largest power of two folded into their
// partner first), tensor by tensor, computed here in double; identical bits on every rank.
std::vector<double> AdasumPairInDouble(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa), cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

std::vector<double> AdasumTreeInDouble(std::vector<std::vector<double>> v) {
  const int n = static_cast<int>(v.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i + p < n; ++i) v[i] = AdasumPairInDouble(v[i], v[i + p]);
  v.resize(p);
  for (int level = 1; level < p; level <<= 1) {
    std::vector<std::vector<double>> next(p);
    for (int i = 0; i < p; ++i) {
      const int lo = i & ~level, hi = i | level;
      next[i] = AdasumPairInDouble(v[lo], v[hi]);
    }
    v = std::move(next);
  }
  return v[0];
}

TEST_P(BackendConformanceTest, AdasumIsTheTreeOfItsFormula) {
  const int n = size();
  const std::vector<int64_t> counts = {7, 0, 1000, 1};
  auto value = [](int rank, int64_t i) { return std::sin(0.7 * i + 1.3 * rank) * (rank + 1); };
  std::vector<std::vector<double>> want(counts.size());
  for (size_t t = 0, off = 0; t < counts.size(); off += counts[t], ++t) {
    std::vector<std::vector<double>> per_rank(n);
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < counts[t]; ++i) per_rank[r].push_back(value(r, off + i));
    }
    want[t] = AdasumTreeInDouble(per_rank);
  }
  Run([&](int rank, Backend& b) {
    const int64_t total = 1008;
    std::vector<double> data(total), scratch(total);
    for (int64_t i = 0; i < total; ++i) data[i] = value(rank, i);
    EXPECT_OK(AdasumAllreduce(&b, data.data(), scratch.data(), counts, DataType::kFloat64, rank,
                              n, /*sequence=*/40));
    double worst = 0;
    for (size_t t = 0, off = 0; t < counts.size(); off += counts[t], ++t) {
      for (int64_t i = 0; i < counts[t]; ++i) worst = std::max(worst, std::abs(data[off + i] - want[t][i]));
    }
    EXPECT_LT(worst, 1e-12) << "rank " << rank;
    // The same bits everywhere: the minimum and maximum over ranks are equal.
    std::vector<double> lo = data, hi = data;
    EXPECT_OK(b.Allreduce(lo.data(), total, DataType::kFloat64, ReduceOp::kMin));
    EXPECT_OK(b.Allreduce(hi.data(), total, DataType::kFloat64, ReduceOp::kMax));
    EXPECT_EQ(lo, hi) << "rank " << rank;
    // float32 too, within its precision, and an integer tensor refused alike on every rank.
    std::vector<float> f(total), fs(total);
    for (int64_t i = 0; i < total; ++i) f[i] = static_cast<float>(value(rank, i));
    EXPECT_OK(AdasumAllreduce(&b, f.data(), fs.data(), counts, DataType::kFloat32, rank, n,
                              /*sequence=*/80));
    for (int64_t i = 0; i < 7; ++i) EXPECT_NEAR(f[i], want[0][i], 1e-4 * (1 + std::abs(want[0][i])));
    std::vector<int32_t> ints(4);
    EXPECT_EQ(AdasumAllreduce(&b, ints.data(), ints.data(), {4}, DataType::kInt32, rank, n, 0)
                  .code(),
              StatusCode::kInvalidArgument);
    EXPECT_OK(b.Barrier());
  });
}

TEST_P(BackendConformanceTest, ExchangeRefusesItselfAndRanksOutsideTheJob) {
  Run([](int rank, Backend& b) {
    char c = 0;
    EXPECT_EQ(b.Exchange({{rank, &c, 1}}, {}, 0).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Exchange({}, {{-1, &c, 1}}, 0).code(), StatusCode::kInvalidArgument);
    EXPECT_OK(b.Exchange({}, {}, 0));  // nothing to move
    EXPECT_OK(b.Barrier());            // and the backend is still usable
  });
}

TEST_P(BackendConformanceTest, ReducescatterEveryDtypeOpAndUnevenCounts) {
  const int n = size();
  std::vector<std::vector<int64_t>> splits;
  for (int64_t total : {0, 1, 7, 1000}) splits.push_back(EvenSplit(total, n));
  std::vector<int64_t> lopsided(n);
  for (int r = 0; r < n; ++r) lopsided[r] = r % 2 == 0 ? 3 * r + 2 : 0;  // zeros in between
  splits.push_back(lopsided);

  Run([n, &splits](int rank, Backend& b) {
    for (DataType dtype : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (const auto& counts : splits) {
          const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
          const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
          std::vector<char> in = Buffer(total, dtype), out = Buffer(counts[rank], dtype);
          for (int64_t i = 0; i < total; ++i) Put(in.data(), i, dtype, Input(rank, i, dtype, op));
          EXPECT_OK(b.Reducescatter(in.data(), out.data(), counts, dtype, op));
          for (int64_t i = 0; i < counts[rank]; ++i) {
            const double got = Get(out.data(), i, dtype);
            const double want = Expected(n, offset + i, dtype, op);
            if (got != want) {
              ADD_FAILURE() << "rank " << rank << " " << Describe(dtype, op, total) << " [" << i
                            << "]: got " << got << " want " << want;
              break;
            }
          }
        }
      }
    }
  });
}

TEST_P(BackendConformanceTest, BarrierHoldsEveryRankUntilAllArrive) {
  const int n = size();
  // Shared by every rank: one atomic for threads, shared memory for processes.
  std::atomic<int>& arrived = testutil::SharedCounter(backend());
  Run([n, &arrived](int rank, Backend& b) {
    for (int round = 0; round < 5; ++round) {
      // The last rank is late, so the others really have to wait for it.
      if (rank == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      arrived.fetch_add(1);
      EXPECT_OK(b.Barrier());
      const int seen = arrived.load();
      EXPECT_GE(seen, n * (round + 1)) << "rank " << rank << " left barrier " << round << " early";
      EXPECT_LT(seen, n * (round + 2));
    }
  });
}

// Different collectives back to back, as the core issues them: each must match up with the same
// call on the other ranks, never with a neighbour.
TEST_P(BackendConformanceTest, MixedSequence) {
  const int n = size();
  Run([n](int rank, Backend& b) {
    for (int iter = 0; iter < 20; ++iter) {
      int32_t x[3] = {rank, iter, 1};
      EXPECT_OK(b.Allreduce(x, 3, DataType::kInt32, ReduceOp::kSum));
      EXPECT_EQ(x[0], n * (n - 1) / 2);
      EXPECT_EQ(x[1], n * iter);
      EXPECT_EQ(x[2], n);
      int64_t v = rank == iter % n ? iter : -1;
      EXPECT_OK(b.Broadcast(&v, sizeof(v), iter % n));
      EXPECT_EQ(v, iter);
      std::vector<int64_t> bytes(n, 1);
      std::vector<char> out(n);
      const char mine = static_cast<char>(rank + iter);
      EXPECT_OK(b.Allgatherv(&mine, out.data(), bytes));
      for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], static_cast<char>(r + iter));
      if (iter % 5 == 0) EXPECT_OK(b.Barrier());
    }
  });
}

TEST_P(BackendConformanceTest, BadArgumentsAreRefusedLocallyAndLeaveBackendUsable) {
  const int n = size();
  Run([n](int rank, Backend& b) {
    char buf[8] = {0};
    std::vector<int64_t> wrong_length(n + 1, 0);
    EXPECT_EQ(b.Allgatherv(buf, buf, wrong_length).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Alltoallv(buf, wrong_length, buf, wrong_length).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Reducescatter(buf, buf, wrong_length, DataType::kInt8, ReduceOp::kSum).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Broadcast(buf, 1, n).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Broadcast(buf, 1, -1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Allreduce(buf, -1, DataType::kInt8, ReduceOp::kSum).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Allreduce(buf, 1, DataType::kInt8, ReduceOp::kAdasum).code(),
              StatusCode::kUnimplemented);
    float f = 1;
    EXPECT_OK(b.Allreduce(&f, 1, DataType::kFloat32, ReduceOp::kSum));
    EXPECT_EQ(f, static_cast<float>(n));
  });
}

}  // namespace
}  // namespace conformance
}  // namespace backends
}  // namespace dadt
