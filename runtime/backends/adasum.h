// Adasum: the adaptive summation of gradients (Maleki et al., "Scaling Distributed Training with
// Adaptive Summation", MLSys 2021), as Horovod's op=Adasum defines it, over any engine that has
// point-to-point transfers (Backend::Exchange: Gloo, MPI, hierarchical).
//
// Two gradients a and b combine as
//
//   Adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
//
// (a coefficient is 1 where its vector is zero): orthogonal gradients add, parallel ones average.
// Each tensor of a fused buffer combines on its own (its own dot products), in double precision
// whatever the dtype. Ranks combine in a binary tree: at level L = 1, 2, 4, ... rank r and
// r ^ L swap what they hold and both compute Adasum(lower rank's, higher rank's), so they end with
// the same bits. Where the size is not a power of two (Horovod refuses it), the ranks past the
// largest power of two p first hand their tensor to rank r - p, which combines it with its own
// (its own as a), and get the result back at the end.
//
//   AdasumAllreduce(backend, data, scratch, counts, DataType::kFloat32, rank, size, sequence);
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {

// float16, bfloat16, float32, float64.
bool AdasumSupports(DataType dtype);

// mine <- Adasum(a, b), tensor by tensor (counts: elements of each tensor, in order), where
// (a, b) = (mine, theirs) when `mine_is_a`, else (theirs, mine).
void AdasumCombine(void* mine, const void* theirs, const std::vector<int64_t>& counts,
                   DataType dtype, bool mine_is_a);

// How many consecutive sequence numbers (Backend::Exchange tags) one AdasumAllreduce of `size`
// ranks uses, from `sequence` on.
uint32_t AdasumSequences(int size);

// Reduces `data` (the tensors of `counts`, back to back) in place over every rank of `backend`.
// `scratch` holds as many bytes as `data`. Every rank calls it with the same counts, dtype and
// sequence.
Status AdasumAllreduce(Backend* backend, void* data, void* scratch,
                       const std::vector<int64_t>& counts, DataType dtype, int rank, int size,
                       uint32_t sequence);

}  // namespace backends
}  // namespace dadt
