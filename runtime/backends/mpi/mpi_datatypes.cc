// dadt dtypes and reduce ops as MPI datatypes and MPI_Ops (see mpi_backend.h for the choice).
//
// The user-defined ops learn the dadt dtype from the MPI datatype handle they are called with:
// float16, bfloat16 and bool each get their own committed contiguous type, created once per
// process after MPI_Init and freed at the start of MPI_Finalize. The 8- and 16-bit integers go the
// same way: Open MPI 4.1's vectorised reduction (op/avx) sums them wrongly in MPI_Reduce_scatter
// with uneven counts (8-bit: an element of a neighbour is added; 16-bit unsigned: the sum
// saturates at 65535 instead of wrapping; both seen at 6 ranks), so dadt reduces them itself.
#include <climits>
#include <mutex>
#include <string>

#include "runtime/backends/mpi/mpi_backend.h"
#include "runtime/backends/mpi/mpi_error.h"
#include "runtime/common/reduce.h"

namespace dadt {
namespace backends {
namespace mpi {
namespace internal {
namespace {

struct CustomTypes {
  MPI_Datatype float16 = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat16 = MPI_DATATYPE_NULL;
  MPI_Datatype boolean = MPI_DATATYPE_NULL;
  MPI_Datatype uint8 = MPI_DATATYPE_NULL;
  MPI_Datatype int8 = MPI_DATATYPE_NULL;
  MPI_Datatype int16 = MPI_DATATYPE_NULL;
  MPI_Datatype uint16 = MPI_DATATYPE_NULL;
  MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, min, max, prod
  Status status;
};

const CustomTypes* g_types = nullptr;

DataType DtypeOf(MPI_Datatype t) {
  if (t == g_types->float16) return DataType::kFloat16;
  if (t == g_types->bfloat16) return DataType::kBfloat16;
  if (t == g_types->uint8) return DataType::kUint8;
  if (t == g_types->int8) return DataType::kInt8;
  if (t == g_types->int16) return DataType::kInt16;
  if (t == g_types->uint16) return DataType::kUint16;
  return DataType::kBool;
}

template <ReduceOp kOp>
void Reduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  ReduceBinary(inout, inout, in, *len, DtypeOf(*type), kOp);
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still works: the moment to free
// the types and ops (MPICH keeps a committed user type alive past MPI_Finalize otherwise, which
// LeakSanitizer reports; Open MPI frees them itself). Nothing uses them after MPI_Finalize.
int FreeTypesAtFinalize(MPI_Comm /*self*/, int key, void* value, void* /*extra*/) {
  auto* t = static_cast<CustomTypes*>(value);
  for (MPI_Datatype* d : {&t->float16, &t->bfloat16, &t->boolean, &t->uint8, &t->int8, &t->int16,
                          &t->uint16}) {
    if (*d != MPI_DATATYPE_NULL) MPI_Type_free(d);
  }
  for (MPI_Op& op : t->ops) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  MPI_Comm_free_keyval(&key);
  return MPI_SUCCESS;
}

Status Build(CustomTypes* t) {
  int key = MPI_KEYVAL_INVALID;
  DADT_MPI_CHECK("create_keyval", MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN,
                                                         &FreeTypesAtFinalize, &key, nullptr));
  DADT_MPI_CHECK("set_attr", MPI_Comm_set_attr(MPI_COMM_SELF, key, t));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(2, MPI_BYTE, &t->float16));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(2, MPI_BYTE, &t->bfloat16));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(1, MPI_BYTE, &t->boolean));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(1, MPI_BYTE, &t->uint8));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(1, MPI_BYTE, &t->int8));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(2, MPI_BYTE, &t->int16));
  DADT_MPI_CHECK("type_contiguous", MPI_Type_contiguous(2, MPI_BYTE, &t->uint16));
  for (MPI_Datatype* d : {&t->float16, &t->bfloat16, &t->boolean, &t->uint8, &t->int8, &t->int16,
                          &t->uint16}) {
    DADT_MPI_CHECK("type_commit", MPI_Type_commit(d));
  }
  MPI_User_function* fns[4] = {&Reduce<ReduceOp::kSum>, &Reduce<ReduceOp::kMin>,
                               &Reduce<ReduceOp::kMax>, &Reduce<ReduceOp::kProduct>};
  for (int i = 0; i < 4; ++i) DADT_MPI_CHECK("op_create", MPI_Op_create(fns[i], 1, &t->ops[i]));
  return Status::OK();
}

const CustomTypes& Types() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto* t = new CustomTypes();  // lives until exit; FreeTypesAtFinalize frees the handles
    t->status = Build(t);
    g_types = t;
  });
  return *g_types;
}

int OpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    default: return -1;
  }
}

}  // namespace

Status MpiTypeAndOp(DataType dtype, ReduceOp op, MPI_Datatype* type, MPI_Op* mpi_op) {
  const int index = OpIndex(op);
  if (index < 0) {
    return Unimplemented(std::string("mpi backend does not reduce with op ") + ReduceOpName(op) +
                         " (Average is Sum followed by a scale in the core)");
  }
  static const MPI_Op kNativeOps[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  *mpi_op = kNativeOps[index];
  switch (dtype) {
    case DataType::kInt32: *type = MPI_INT32_T; return Status::OK();
    case DataType::kInt64: *type = MPI_INT64_T; return Status::OK();
    case DataType::kFloat32: *type = MPI_FLOAT; return Status::OK();
    case DataType::kFloat64: *type = MPI_DOUBLE; return Status::OK();
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBfloat16:
    case DataType::kBool: break;
    default:
      return InvalidArgument("unknown dtype " + std::to_string(static_cast<int>(dtype)));
  }
  const CustomTypes& t = Types();
  DADT_RETURN_IF_ERROR(t.status);
  switch (dtype) {
    case DataType::kFloat16: *type = t.float16; break;
    case DataType::kBfloat16: *type = t.bfloat16; break;
    case DataType::kUint8: *type = t.uint8; break;
    case DataType::kInt8: *type = t.int8; break;
    case DataType::kInt16: *type = t.int16; break;
    case DataType::kUint16: *type = t.uint16; break;
    default: *type = t.boolean; break;
  }
  *mpi_op = t.ops[index];
  return Status::OK();
}

}  // namespace internal
}  // namespace mpi
}  // namespace backends
}  // namespace dadt
