// Walking the pieces of a fused allreduce (AllreducePiece, backend.h) as the one buffer they
// stand for: the engines that reduce pieces where they lie (shared memory, Gloo's ring) cut that
// buffer into chunks or segments and need, for each, the pieces it falls on.
//
//   const std::vector<int64_t> starts = PieceStarts(pieces);   // starts.back(): the total
//   ForEachShare(pieces, starts, lo, hi, [&](const AllreducePiece& p, int64_t from, int64_t to,
//                                            int64_t k) { /* p's elements [from, from + k) are
//                                            the buffer's [lo + to, lo + to + k) */ });
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/backends/backend.h"

namespace dadt {
namespace backends {

// Where the pieces lie in the buffer they stand for: starts[i] is piece i's first element,
// starts.back() the total.
inline std::vector<int64_t> PieceStarts(const std::vector<AllreducePiece>& pieces) {
  std::vector<int64_t> starts(pieces.size() + 1, 0);
  for (size_t i = 0; i < pieces.size(); ++i) starts[i + 1] = starts[i] + pieces[i].count;
  return starts;
}

// The piece holding element `at` of the buffer (0 <= at < starts.back()); the last of several
// when empty pieces share the start.
inline size_t PieceAt(const std::vector<int64_t>& starts, int64_t at) {
  return static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), at) - starts.begin() - 1);
}

// Calls fn(piece, element offset in the piece, element offset from `lo`, elements) for each
// piece's share of elements [lo, hi) of the buffer the pieces stand for.
template <typename Fn>
void ForEachShare(const std::vector<AllreducePiece>& pieces, const std::vector<int64_t>& starts,
                  int64_t lo, int64_t hi, Fn fn) {
  size_t i = PieceAt(starts, lo);
  for (int64_t at = lo; at < hi; ++i) {
    const int64_t end = std::min(hi, starts[i + 1]);
    if (end > at) fn(pieces[i], at - starts[i], at - lo, end - at);
    at = std::max(at, end);
  }
}

}  // namespace backends
}  // namespace dadt
