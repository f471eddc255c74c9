// Core vocabulary shared by every layer: data types, reduce ops, collective kinds, devices.
//
// These enums cross the C API as plain ints, so their numeric values are part of the
// stable ABI (runtime/c_api.h) and must never be renumbered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dadt {

enum class DataType : int32_t {
  kUint8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBfloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kInt16 = 9,
  kUint16 = 10,
};
constexpr int kNumDataTypes = 11;

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
bool IsFloatingPoint(DataType dtype);
bool IsValidDataType(int32_t value);

enum class ReduceOp : int32_t {
  kAverage = 0,
  kSum = 1,
  kAdasum = 2,  // allreduce of floating-point tensors (runtime/backends/adasum.h)
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};
const char* ReduceOpName(ReduceOp op);
bool IsValidReduceOp(int32_t value);

enum class OpType : int32_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  // Process sets (docs/process-sets.md): negotiated on the global set like a barrier. An add
  // carries the new set's global ranks in Request::splits, a remove the set's id in Request::root.
  kProcessSetAdd = 7,
  kProcessSetRemove = 8,
  // Point to point (docs/api.md, "Point to point and gossip"). A peer exchange pairs two ranks
  // that named each other in Request::send_ranks / recv_ranks: the coordinator matches them as
  // they arrive (runtime/core/negotiation/peer_matcher.h), so only the pair waits for the pair.
  // A neighbor allgather is a collective of every member over a graph: each rank sends its tensor
  // to send_ranks and receives recv_ranks' tensors, concatenated in that order.
  kPeerExchange = 9,
  kNeighborAllgather = 10,
};
const char* OpTypeName(OpType op);

// -1 is host memory; >= 0 is a CUDA device ordinal (the GPU data plane, NCCL, moves it);
// kStagedGpuDevice is a GPU tensor that the front end copies through host memory for a host
// engine (Gloo, MPI). Ranks must agree on the kind, not on the ordinal.
constexpr int32_t kCpuDevice = -1;
constexpr int32_t kStagedGpuDevice = -2;

// Where this process sits in the job: its rank among all ranks, on its host (local) and across
// hosts (cross). Shared by the runtime's and the backends' options.
struct JobGeometry {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);

}  // namespace dadt
