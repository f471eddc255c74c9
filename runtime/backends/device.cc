#include "runtime/backends/device.h"

#include <string>
#include <vector>

namespace dadt {
namespace backends {
namespace {

// Written once during static initialization, read afterwards.
DeviceRegistry::Impl*& Registered() {
  static DeviceRegistry::Impl* impl = nullptr;
  return impl;
}

}  // namespace

bool DeviceRegistry::Register(Impl impl) {
  if (Registered()) return false;
  Registered() = new Impl(std::move(impl));
  return true;
}

bool DeviceRegistry::Built() { return Registered() != nullptr; }

int DeviceRegistry::VisibleDevices(std::string* why) {
  if (!Registered()) {
    if (why) *why = "dadt was built without CUDA (see docs/backends.md, Building with CUDA/NCCL)";
    return 0;
  }
  return Registered()->visible_devices(why);
}

StatusOr<std::unique_ptr<DeviceContext>> DeviceRegistry::Create(const DeviceOptions& options) {
  if (!Registered()) {
    return Unimplemented("GPU tensors need dadt built with CUDA and NCCL (tools/configure_cuda.py "
                         "turns it on when nvcc and NCCL are found)");
  }
  return Registered()->create(options);
}

Status DeviceRegistry::CastOnStream(const void* in, DataType in_type, void* out,
                                    DataType out_type, int64_t count, uintptr_t stream) {
  if (!Registered()) return Unimplemented("device casts need dadt built with CUDA");
  return Registered()->cast(in, in_type, out, out_type, count, stream);
}

Status DeviceRegistry::NcclReduces(DataType dtype, ReduceOp op) {
  if (!Registered()) return Unimplemented("NCCL needs dadt built with CUDA");
  return Registered()->nccl_reduces(dtype, op == ReduceOp::kAverage ? ReduceOp::kSum : op);
}

int DeviceRegistry::NcclVersion() { return Registered() ? Registered()->nccl_version() : 0; }

Status DeviceRegistry::CopyOnStream(const std::vector<CopySpan>& spans, uintptr_t stream) {
  if (!Registered()) return Unimplemented("device copies need dadt built with CUDA");
  return Registered()->copy(spans, stream);
}

}  // namespace backends
}  // namespace dadt
