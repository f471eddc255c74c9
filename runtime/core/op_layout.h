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

// First row of rank i's share in a reducescatter: the rows of the ranks before it.
inline int64_t ScatterFirstRow(int64_t d0, int size, int i) {
  int64_t row = 0;
  for (int j = 0; j < i; ++j) row += ScatterRows(d0, size, j);
  return row;
}

// Elements each rank receives in a reducescatter of `shape` over `size` ranks.
inline std::vector<int64_t> ScatterCounts(const Shape& shape, int size) {
  const int64_t d0 = shape.empty() ? 1 : shape[0];
  std::vector<int64_t> counts(size);
  for (int i = 0; i < size; ++i) counts[i] = ScatterRows(d0, size, i) * RowElements(shape);
  return counts;
}

// Allgather: bytes each rank contributes (sizes = first dimension per rank) and the output shape.
struct GatherLayout {
  std::vector<int64_t> bytes;
  Shape out_shape;
};
inline GatherLayout AllgatherLayout(const Shape& shape, DataType dtype,
                                    const std::vector<int64_t>& sizes, int size) {
  const int64_t row_bytes = RowElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
  GatherLayout l;
  int64_t rows = 0;
  for (int i = 0; i < size; ++i) {
    l.bytes.push_back(sizes[i] * row_bytes);
    rows += sizes[i];
  }
  l.out_shape = WithFirstDim(shape, rows);
  return l;
}

// Alltoall on `rank`: bytes sent to and received from each rank (sizes = the size x size matrix of
// rows, row r = what rank r sends), rows received from each rank, and the output shape.
struct AlltoallLayout {
  std::vector<int64_t> send, recv, splits;
  Shape out_shape;
};
inline AlltoallLayout MakeAlltoallLayout(const Shape& shape, DataType dtype,
                                         const std::vector<int64_t>& sizes, int size, int rank) {
  const int64_t row_bytes = RowElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
  AlltoallLayout l;
  int64_t rows = 0;
  for (int j = 0; j < size; ++j) {
    l.send.push_back(sizes[rank * size + j] * row_bytes);
    l.splits.push_back(sizes[j * size + rank]);
    l.recv.push_back(l.splits.back() * row_bytes);
    rows += l.splits.back();
  }
  l.out_shape = WithFirstDim(shape, rows);
  return l;
}

// Reductions run by the engines: Average is Sum followed by a division by the rank count.
inline ReduceOp BackendOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

}  // namespace core
}  // namespace dadt
