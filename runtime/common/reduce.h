// CPU element-wise kernels used by every CPU data plane: reductions and scaling for all dtypes.
//
// float16 and bfloat16 are computed in float32 and rounded back (round-to-nearest-even); bool
// treats Sum/Max as logical or and Min/Product as logical and. Average is not a kernel: the core
// runs Sum and then ScaleBuffer by 1/size.
//
//   ReduceBinary(out, a, b, n, DataType::kFloat32, ReduceOp::kSum);  // out[i] = a[i] + b[i]
#pragma once

#include <cstdint>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {

// out[i] = a[i] (op) b[i] for i < n. out may alias a or b. op: kSum, kMin, kMax, kProduct.
void ReduceBinary(void* out, const void* a, const void* b, int64_t n, DataType dtype, ReduceOp op);

// buf[i] *= factor. Integer types round toward zero; bool is refused (InvalidArgument).
Status ScaleBuffer(void* buf, int64_t n, DataType dtype, double factor);

// buf[i] /= divisor: Average's last step. Division, not a multiply by 1/divisor, so that results
// equal a plain mean (5/3, not 5*(1/3)); integers divide exactly, truncating toward zero.
Status DivideBuffer(void* buf, int64_t n, DataType dtype, int64_t divisor);

// Half-precision conversions (exposed for tests and the fp16 compressor).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bfloat16ToFloat(uint16_t b);
uint16_t FloatToBfloat16(float f);

}  // namespace dadt
