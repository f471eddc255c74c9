// DLPack <-> dadt conversions for the C API (runtime/c_api*.cc): element types both ways, and the
// layout check every tensor handed to the runtime passes (host or, in a CUDA build, GPU memory,
// compact row-major).
#pragma once

#include <string>

#include <dlpack/dlpack.h>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace capi {

// The dadt type of a DLPack type, or InvalidArgument naming the tensor and listing what is supported.
StatusOr<DataType> ToDataType(const DLDataType& t, const std::string& name);
DLDataType ToDLDataType(DataType d);
// OK when `t` is host memory (or GPU memory in a CUDA build) laid out compactly in row-major order;
// otherwise InvalidArgument naming the tensor and what to do.
Status CheckLayout(const DLTensor& t, const std::string& name);

}  // namespace capi
}  // namespace dadt
