// Fusion planning: packs ready allreduce responses into as few collectives as the threshold allows.
//
// Input: responses that are ready on every rank, in the order the coordinator saw them become ready,
// each naming one tensor (total_bytes set). Allreduces that agree on dtype, reduce op, scale
// factors, device and process set (a fused collective never mixes sets) are packed greedily, in order, into buckets of at most `threshold_bytes`
// (a tensor larger than the threshold goes alone and is reduced in place, without a copy into the
// fusion buffer). Other responses pass through unchanged. A threshold of 0 turns fusion off.
// Why greedy in arrival order: gradients become ready in backward order, and the earliest ones
// should go out first; buckets close as soon as they are full.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/negotiation/message.h"

namespace dadt {
namespace core {

std::vector<Response> PlanFusion(std::vector<Response> ready, int64_t threshold_bytes);

}  // namespace core
}  // namespace dadt
