// CudaDevice: the CUDA implementation of DeviceContext (registered with DeviceRegistry as "CUDA").
//
// Nothing outside this folder includes this header; the core reaches it through
// runtime/backends/device.h. One CudaDevice per GPU the process uses; it owns:
//   - a non-blocking stream that every dadt kernel, copy and NCCL call for that GPU goes on;
//   - a pool of events: WaitForStream records one on the framework's stream and makes the own
//     stream wait on it (cudaStreamWaitEvent: no host synchronisation);
//   - a completion thread: OnComplete records a done event and a host callback
//     (cudaLaunchHostFunc) on the stream, which wakes the thread the moment the GPU gets there
//     (no polling latency on the training step); while waiting, every 2 ms the thread checks the
//     event for device errors, the engine's health (ncclCommGetAsyncError) and the timeout, so a
//     dead peer is noticed and the communicator aborted instead of hanging.
// Threading: the loop thread calls everything; only the completion thread runs callbacks and
// queries events. cudaSetDevice is per thread, so both threads set it before touching CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/backends/device.h"

namespace dadt {
namespace backends {
namespace nccl {

class CudaDevice final : public DeviceContext {
 public:
  static StatusOr<std::unique_ptr<DeviceContext>> Create(const DeviceOptions& options);
  ~CudaDevice() override;

  int device() const override { return options_.device; }
  uintptr_t stream() const override { return reinterpret_cast<uintptr_t>(stream_); }
  Status WaitForStream(uintptr_t framework_stream) override;
  Status Copy(const std::vector<CopySpan>& spans) override;
  Status Scale(void* buf, int64_t count, DataType dtype, double factor) override;
  Status Divide(void* buf, int64_t count, DataType dtype, int64_t divisor) override;
  Status Cast(const void* in, DataType in_type, void* out, DataType out_type,
              int64_t count) override;
  StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes, Use use) override;
  void OnComplete(std::function<void(Status)> done) override;

 
  // What the stream's host callbacks have reached; shared with callbacks that may outlive us.
  struct Reached {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t count = 0;
  };

 private:
  explicit CudaDevice(const DeviceOptions& options) : options_(options) {}
  bool WaitReached(uint64_t seq, std::chrono::microseconds at_most);
  struct Pending {
    cudaEvent_t event;
    std::function<void(Status)> done;
    std::chrono::steady_clock::time_point queued;
    uint64_t seq;
  };
  StatusOr<cudaEvent_t> TakeEvent();
  void CompletionLoop();

  const DeviceOptions options_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> free_events_;  // loop thread only (returned under mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> returned_events_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_time_;
  Status failed_;  // once set, later work completes with it at once
  std::shared_ptr<Reached> reached_ = std::make_shared<Reached>();
  uint64_t issued_ = 0;  // loop thread only
  std::thread completion_;
};

namespace internal {
// Visible devices as cudaGetDeviceCount reports them; 0 with the reason otherwise.
int VisibleCudaDevices(std::string* why);
// float32 <-> float16 on `stream` with the device kernels (CudaDevice::Cast on its own stream).
Status CastOnStream(const void* in, DataType in_type, void* out, DataType out_type, int64_t count,
                    uintptr_t stream);
// The spans with the batched copy kernel on `stream` (CudaDevice::Copy on its own stream).
Status CopyOnStream(const std::vector<CopySpan>& spans, uintptr_t stream);
}  // namespace internal

}  // namespace nccl
}  // namespace backends
}  // namespace dadt
