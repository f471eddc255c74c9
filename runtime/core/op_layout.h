// Layout arithmetic shared by the host and the device executors: rows of a tensor, the output
// shape of a gather, and how reducescatter splits the first dimension over the ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/common/types.h"

namespace dadt {
namespace core {

// Elements per row (product of every dimension but the first; 1 for scalars and vectors).
inline int64_t RowElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// `shape` with its first dimension replaced (a scalar becomes a vector of `first`).
inline Shape WithFirstDim(const Shape& shape, int64_t first) {
  Shape s = shape.empty() ? Shape{first} : shape;
  s[0] = first;
  return s;
}

// Rows of the first dimension that rank i receives in a reducescatter: d0 / size, and one more
// for the first d0 % size ranks.
inline int64_t ScatterRows(int64_t d0, int size, int i) { return d0 / size + (i < d0 % size ? 1 : 0); }

// Elements each rank receives in a reducescatter of `shape` over `size` ranks.
inline std::vector<int64_t> ScatterCounts(const Shape& shape, int size) {
  const int64_t d0 = shape.empty() ? 1 : shape[0];
  std::vector<int64_t> counts(size);
  for (int i = 0; i < size; ++i) counts[i] = ScatterRows(d0, size, i) * RowElements(shape);
  return counts;
}

// Reductions run by the engines: Average is Sum followed by a division by the rank count.
inline ReduceOp BackendOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

}  // namespace core
}  // namespace dadt
