// DeviceContext: the GPU memory services the core needs for tensors that live in device memory.
//
// The core never includes CUDA headers: for a tensor on a GPU it asks the registered device
// implementation (runtime/backends/nccl/cuda_device.h, linked only in the CUDA build) for a
// context on that device and does every staging step through it. All work goes on the context's
// own stream, ordered after the framework's stream with an event (no host synchronisation), and
// completion reaches the waiting framework thread through OnComplete's callback, which a
// completion thread runs once the device has passed the work:
//
//   auto ctx = DeviceRegistry::Create(device, timeout);
//   DADT_RETURN_IF_ERROR((*ctx)->WaitForStream(framework_stream));
//   DADT_RETURN_IF_ERROR((*ctx)->Copy({{src, fusion, bytes}, ...}));  // one kernel for all
//   ... backend->Allreduce(fusion, ...) on (*ctx)->stream() ...
//   (*ctx)->OnComplete([](Status s) { /* complete the handles */ });
//
// Threading: every method except OnComplete's callback runs on the core's loop thread. Lifetime:
// owned by the core's executor; the destructor waits for the device, runs the callbacks still
// pending (with Aborted if the work could not finish) and joins the completion thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {

// One copy of `bytes` bytes between two device buffers (or a zero fill when src is null).
struct CopySpan {
  const void* src;
  void* dst;
  int64_t bytes;
};

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  virtual int device() const = 0;
  // The stream all of dadt's work on this device goes on (a cudaStream_t as an integer).
  virtual uintptr_t stream() const = 0;
  // Orders later work on stream() after what is enqueued so far on `framework_stream` (0: the
  // legacy default stream), by an event; the host does not wait.
  virtual Status WaitForStream(uintptr_t framework_stream) = 0;
  // All spans in one batched kernel on stream() (the fusion buffer's pack and unpack).
  virtual Status Copy(const std::vector<CopySpan>& spans) = 0;
  // buf[i] *= factor for `count` elements of dtype, on stream().
  virtual Status Scale(void* buf, int64_t count, DataType dtype, double factor) = 0;
  // buf[i] /= divisor, with the host's semantics (runtime/common/reduce.h DivideBuffer).
  virtual Status Divide(void* buf, int64_t count, DataType dtype, int64_t divisor) = 0;
  // Element-wise conversion between float32 and float16 on stream() (fp16 compression).
  virtual Status Cast(const void* in, DataType in_type, void* out, DataType out_type,
                      int64_t count) = 0;
  // Device memory of at least `bytes` bytes (null for 0), freed when the last owner lets go.
  // kScratch memory is used by stream() only: allocation and free are stream-ordered (no host
  // synchronisation). kOutput memory goes to the framework, whose streams may still read it when
  // it is dropped, so its free waits for the device.
  enum class Use { kScratch, kOutput };
  virtual StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes, Use use) = 0;
  // Calls `done` on the completion thread once the device has finished everything enqueued on
  // stream() so far: with OK, or with the error of DeviceOptions::health (polled while waiting;
  // an engine's asynchronous error), or TimeoutError after DeviceOptions::timeout. On a failure
  // DeviceOptions::on_failure runs first (e.g. abort the communicator so no rank waits forever)
  // and every later callback gets the same error.
  virtual void OnComplete(std::function<void(Status)> done) = 0;
};

struct DeviceOptions {
  int device = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Polled by the completion thread while work is outstanding; a non-OK answer fails it.
  std::function<Status()> health;
  // Called once, on the completion thread, when work fails or times out.
  std::function<void()> on_failure;
};

// The device implementation registers itself at static-initialization time (its cc_library is
// alwayslink). Without the CUDA build nothing is registered and Built() is false.
class DeviceRegistry {
 public:
  struct Impl {
    const char* name;  // "CUDA"
    std::function<int(std::string* why)> visible_devices;
    std::function<StatusOr<std::unique_ptr<DeviceContext>>(const DeviceOptions&)> create;
    // DeviceContext::Cast on a caller's stream (the framework's): fp16 compression in the front end.
    std::function<Status(const void*, DataType, void*, DataType, int64_t, uintptr_t)> cast;
    // DeviceContext::Copy on a caller's stream: the fusion copy kernel, for examples/benchmarks/
    // gpu_bench.py, which times it against a plain device-to-device copy on the same stream.
    std::function<Status(const std::vector<CopySpan>&, uintptr_t)> copy;
    // The linked NCCL's version code (ncclGetVersion: 22807 for 2.28.7); needs no GPU.
    std::function<int()> nccl_version;
    // OK when NCCL reduces `dtype` with `op` (Average: as Sum); else why not (InvalidArgument).
    std::function<Status(DataType, ReduceOp)> nccl_reduces;
  };
  static bool Register(Impl impl);
  static bool Built();
  // How many devices this process sees; 0 with `why` filled when none (or not built).
  static int VisibleDevices(std::string* why);
  static StatusOr<std::unique_ptr<DeviceContext>> Create(const DeviceOptions& options);
  static Status CastOnStream(const void* in, DataType in_type, void* out, DataType out_type,
                             int64_t count, uintptr_t stream);
  static Status CopyOnStream(const std::vector<CopySpan>& spans, uintptr_t stream);
  // NCCL's version code, 0 without the CUDA build.
  static int NcclVersion();
  // Whether NCCL reduces `dtype` with `op`, so that a GPU reduction it cannot run is refused when
  // it is enqueued, on every rank, instead of failing the job when it runs.
  static Status NcclReduces(DataType dtype, ReduceOp op);
};

}  // namespace backends
}  // namespace dadt
