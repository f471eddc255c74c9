// Expected values for backend tests, computed without the kernels under test.
//
// Inputs are small integers (scaled per dtype) so that every reduction over up to a handful of
// ranks is exact in every dtype and independent of the reduction order: a backend may reduce in
// any order and still match bit for bit. Half types go through a test-local codec (normal values
// and zero only, which is all the inputs use).
//
//   Put(buf, i, dtype, Input(rank, i, dtype, op));        // fill rank's input
//   EXPECT_EQ(Get(buf, i, dtype), Expected(n, i, dtype, op));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/types.h"

namespace dadt {
namespace testutil {

void Put(void* buf, int64_t i, DataType dtype, double v);
double Get(const void* buf, int64_t i, DataType dtype);

// Rank `rank`'s element i for a reduction with `op`, and the reduction over ranks 0..size-1.
double Input(int rank, int64_t i, DataType dtype, ReduceOp op);
double Expected(int size, int64_t i, DataType dtype, ReduceOp op);

// A buffer for `count` elements whose data() is never null (even for count 0).
std::vector<char> Buffer(int64_t count, DataType dtype);
std::string Describe(DataType dtype, ReduceOp op, int64_t count);

// Byte k of the message that rank a sends rank b (any two ints) in the byte collectives.
char Byte(int a, int b, int64_t k);

// Splits `total` elements over `size` ranks, the first total % size ranks one larger.
std::vector<int64_t> EvenSplit(int64_t total, int size);

}  // namespace testutil
}  // namespace dadt
