#include "runtime/dlpack_types.h"

#include <string>

#include "runtime/backends/device.h"

namespace dadt {
namespace capi {
namespace {

constexpr uint8_t kDLBoolCode = 6;  // DLPack >= 0.8; Debian ships 0.6 headers

}  // namespace

StatusOr<DataType> ToDataType(const DLDataType& t, const std::string& name) {
  if (t.lanes == 1) {
    if (t.code == kDLUInt && t.bits == 8) return DataType::kUint8;
    if (t.code == kDLInt && t.bits == 8) return DataType::kInt8;
    if (t.code == kDLInt && t.bits == 16) return DataType::kInt16;
    if (t.code == kDLUInt && t.bits == 16) return DataType::kUint16;
    if (t.code == kDLInt && t.bits == 32) return DataType::kInt32;
    if (t.code == kDLInt && t.bits == 64) return DataType::kInt64;
    if (t.code == kDLFloat && t.bits == 16) return DataType::kFloat16;
    if (t.code == kDLBfloat && t.bits == 16) return DataType::kBfloat16;
    if (t.code == kDLFloat && t.bits == 32) return DataType::kFloat32;
    if (t.code == kDLFloat && t.bits == 64) return DataType::kFloat64;
    if (t.code == kDLBoolCode && t.bits == 8) return DataType::kBool;
  }
  return InvalidArgument(
      "tensor '" + name + "' has an unsupported data type (DLPack code " + std::to_string(t.code) +
      ", " + std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
      " lanes); supported: uint8, int8, int16, uint16, int32, int64, float16, bfloat16, float32, float64, "
      "bool");
}

DLDataType ToDLDataType(DataType d) {
  DLDataType t;
  t.lanes = 1;
  t.bits = static_cast<uint8_t>(DataTypeSize(d) * 8);
  switch (d) {
    case DataType::kUint8:
    case DataType::kUint16: t.code = kDLUInt; break;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64: t.code = kDLInt; break;
    case DataType::kBfloat16: t.code = kDLBfloat; break;
    case DataType::kBool: t.code = kDLBoolCode; break;
    default: t.code = kDLFloat; break;
  }
  return t;
}

Status CheckLayout(const DLTensor& t, const std::string& name) {
  const bool gpu = t.device.device_type == kDLCUDA;
  if (gpu && !backends::DeviceRegistry::Built()) {
    return InvalidArgument("tensor '" + name +
                                 "' is in GPU memory; GPU tensors need dadt built with CUDA and NCCL");
  }
  if (!gpu && t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    return InvalidArgument("tensor '" + name + "' is on an unsupported device (DLPack type " +
                                 std::to_string(t.device.device_type) + ")");
  }
  if (t.strides == nullptr) return Status::OK();
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] == 0) return Status::OK();  // empty: layout is irrelevant
    if (t.shape[i] != 1 && t.strides[i] != expected) {
      return InvalidArgument("tensor '" + name +
                                   "' is not contiguous; make it contiguous first (in PyTorch: "
                                   "tensor.contiguous())");
    }
    expected *= t.shape[i];
  }
  return Status::OK();
}

}  // namespace capi
}  // namespace dadt
