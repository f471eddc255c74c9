// The C API's CUDA helpers (runtime/c_api.h), for the front ends' GPU paths: whether a GPU is
// visible, a dtype cast and a batch of copies on the framework's stream, NCCL's version. Without a
// CUDA build they answer through DeviceRegistry's stubs (no GPU).
#include <string>
#include <vector>

#include "runtime/backends/device.h"
#include "runtime/c_api.h"
#include "runtime/c_api_internal.h"
#include "runtime/dlpack_types.h"

namespace {

using dadt::Status;
using dadt::capi::CheckLayout;
using dadt::capi::Fail;
using dadt::capi::ToDataType;

}  // namespace

extern "C" {

int dadt_cuda_available(void) {
  std::string why;
  if (dadt::backends::DeviceRegistry::VisibleDevices(&why) > 0) return 1;
  Fail(dadt::PreconditionFailed(why));
  return 0;
}

int dadt_cuda_cast(const DLTensor* in, const DLTensor* out, uintptr_t stream) {
  auto in_type = ToDataType(in->dtype, "cast input");
  if (!in_type.ok()) return Fail(in_type.status());
  auto out_type = ToDataType(out->dtype, "cast output");
  if (!out_type.ok()) return Fail(out_type.status());
  const dadt::Shape shape(in->shape, in->shape + in->ndim);
  if (in->device.device_type != kDLCUDA || out->device.device_type != kDLCUDA ||
      in->device.device_id != out->device.device_id ||
      shape != dadt::Shape(out->shape, out->shape + out->ndim)) {
    return Fail(dadt::InvalidArgument("cuda_cast: input and output must be CUDA tensors of one "
                                      "shape on one GPU"));
  }
  Status s = CheckLayout(*in, "cast input");
  if (s.ok()) s = CheckLayout(*out, "cast output");
  if (s.ok()) {
    s = dadt::backends::DeviceRegistry::CastOnStream(
        static_cast<const char*>(in->data) + in->byte_offset, *in_type,
        static_cast<char*>(out->data) + out->byte_offset, *out_type, dadt::NumElements(shape), stream);
  }
  return s.ok() ? DADT_OK : Fail(s);
}

int dadt_nccl_version(void) { return dadt::backends::DeviceRegistry::NcclVersion(); }

int dadt_cuda_copy_batch(const uintptr_t* src, const uintptr_t* dst, const int64_t* bytes, int count,
                         uintptr_t stream) {
  if (count < 0 || (count > 0 && (!src || !dst || !bytes))) {
    return Fail(dadt::InvalidArgument("cuda_copy_batch: null span arrays"));
  }
  std::vector<dadt::backends::CopySpan> spans;
  spans.reserve(count);
  for (int i = 0; i < count; ++i) {
    if (bytes[i] < 0 || (bytes[i] > 0 && dst[i] == 0)) {
      return Fail(dadt::InvalidArgument("cuda_copy_batch: span " + std::to_string(i) +
                                        " has a negative size or no destination"));
    }
    spans.push_back({reinterpret_cast<const void*>(src[i]), reinterpret_cast<void*>(dst[i]), bytes[i]});
  }
  dadt::Status s = dadt::backends::DeviceRegistry::CopyOnStream(spans, stream);
  return s.ok() ? DADT_OK : Fail(s);
}

}  // extern "C"
