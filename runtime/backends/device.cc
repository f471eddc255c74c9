#include "runtime/backends/device.h"

#include <algorithm>
#include <chrono>
#include <future>
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

StatusOr<double> MeasureFusionCopy(int device, int64_t span_bytes, int spans, int iters) {
  if (span_bytes <= 0 || spans <= 0 || iters <= 0) {
    return InvalidArgument("MeasureFusionCopy: sizes and counts must be > 0");
  }
  DeviceOptions o;
  o.device = device;
  auto ctx = DeviceRegistry::Create(o);
  if (!ctx.ok()) return ctx.status();
  DeviceContext& d = **ctx;
  auto fusion = d.Allocate(span_bytes * spans, DeviceContext::Use::kScratch);
  if (!fusion.ok()) return fusion.status();
  std::vector<std::shared_ptr<void>> inputs;
  std::vector<CopySpan> pack;
  for (int i = 0; i < spans; ++i) {
    auto in = d.Allocate(span_bytes, DeviceContext::Use::kScratch);
    if (!in.ok()) return in.status();
    pack.push_back({in->get(), static_cast<char*>(fusion->get()) + i * span_bytes, span_bytes});
    inputs.push_back(std::move(*in));
  }
  auto drain = [&d]() {
    std::promise<Status> p;
    d.OnComplete([&p](Status s) { p.set_value(s); });
    return p.get_future().get();
  };
  // Each timed batch enqueues 10 packs back to back, so the host's wake-up latency is amortised.
  constexpr int kPerBatch = 10;
  DADT_RETURN_IF_ERROR(d.Copy(pack));  // warm-up
  DADT_RETURN_IF_ERROR(drain());
  std::vector<double> times;
  for (int it = 0; it < iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kPerBatch; ++k) DADT_RETURN_IF_ERROR(d.Copy(pack));
    DADT_RETURN_IF_ERROR(drain());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kPerBatch);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace backends
}  // namespace dadt
