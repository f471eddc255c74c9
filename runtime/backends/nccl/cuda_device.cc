#include "runtime/backends/nccl/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "runtime/backends/nccl/device_kernels.h"
#include "runtime/backends/nccl/nccl_backend.h"
#include "runtime/backends/nccl/nccl_error.h"

namespace dadt {
namespace backends {
namespace nccl {
namespace {
// At shutdown, work in flight gets this long to finish before it is abandoned.
constexpr auto kShutdownGrace = std::chrono::seconds(10);
// How often the completion thread checks health and timeouts while work is outstanding.
constexpr auto kHealthPeriod = std::chrono::microseconds(2000);
}  // namespace

namespace internal {

Status CastOnStream(const void* in, DataType in_type, void* out, DataType out_type, int64_t count,
                    uintptr_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (in_type == DataType::kFloat32 && out_type == DataType::kFloat16) {
    DADT_CUDA_CHECK("fp16 compression",
                    dadt_cuda::LaunchFloatToHalf(static_cast<const float*>(in), out, count, s));
    return Status::OK();
  }
  if (in_type == DataType::kFloat16 && out_type == DataType::kFloat32) {
    DADT_CUDA_CHECK("fp16 decompression",
                    dadt_cuda::LaunchHalfToFloat(in, static_cast<float*>(out), count, s));
    return Status::OK();
  }
  return Unimplemented(std::string("device cast from ") + DataTypeName(in_type) + " to " +
                       DataTypeName(out_type));
}

Status CopyOnStream(const std::vector<CopySpan>& spans, uintptr_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  dadt_cuda::CopyBatch batch;
  batch.count = 0;
  for (const CopySpan& span : spans) {
    if (span.bytes <= 0) continue;
    batch.src[batch.count] = span.src;
    batch.dst[batch.count] = span.dst;
    batch.bytes[batch.count] = span.bytes;
    if (++batch.count == dadt_cuda::kMaxCopiesPerLaunch) {
      DADT_CUDA_CHECK("fusion buffer copy", dadt_cuda::LaunchCopyBatch(batch, s));
      batch.count = 0;
    }
  }
  DADT_CUDA_CHECK("fusion buffer copy", dadt_cuda::LaunchCopyBatch(batch, s));
  return Status::OK();
}

int VisibleCudaDevices(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) {
      *why = std::string("no CUDA device visible (cudaGetDeviceCount: ") +
             (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) + ")";
    }
    (void)cudaGetLastError();  // clear the sticky-less error so later queries start clean
    return 0;
  }
  return n;
}

}  // namespace internal

StatusOr<std::unique_ptr<DeviceContext>> CudaDevice::Create(const DeviceOptions& options) {
  std::string why;
  const int n = internal::VisibleCudaDevices(&why);
  if (n == 0) return PreconditionFailed("GPU tensors need a GPU: " + why);
  if (options.device < 0 || options.device >= n) {
    return InvalidArgument("CUDA device " + std::to_string(options.device) + " does not exist (" +
                           std::to_string(n) + " visible)");
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice(options));
  DADT_CUDA_CHECK("set device", cudaSetDevice(options.device));
  DADT_CUDA_CHECK("create stream", cudaStreamCreateWithFlags(&d->stream_, cudaStreamNonBlocking));
  d->completion_ = std::thread([p = d.get()] { p->CompletionLoop(); });
  return std::unique_ptr<DeviceContext>(std::move(d));
}

CudaDevice::~CudaDevice() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stop_time_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
  if (completion_.joinable()) completion_.join();
  (void)cudaSetDevice(options_.device);
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : returned_events_) (void)cudaEventDestroy(e);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

StatusOr<cudaEvent_t> CudaDevice::TakeEvent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_events_.insert(free_events_.end(), returned_events_.begin(), returned_events_.end());
    returned_events_.clear();
  }
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e;
  DADT_CUDA_CHECK("create event", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

Status CudaDevice::WaitForStream(uintptr_t framework_stream) {
  DADT_CUDA_CHECK("set device", cudaSetDevice(options_.device));
  auto event = TakeEvent();
  if (!event.ok()) return event.status();
  auto s = reinterpret_cast<cudaStream_t>(framework_stream);
  Status st = DADT_CUDA_STATUS("record framework stream", cudaEventRecord(*event, s));
  if (st.ok()) {
    st = DADT_CUDA_STATUS("wait for framework stream", cudaStreamWaitEvent(stream_, *event, 0));
  }
  // The event may be reused right away: the wait above captured its state at this point.
  free_events_.push_back(*event);
  return st;
}

Status CudaDevice::Copy(const std::vector<CopySpan>& spans) {
  return internal::CopyOnStream(spans, reinterpret_cast<uintptr_t>(stream_));
}

Status CudaDevice::Scale(void* buf, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return Status::OK();
  if (dtype == DataType::kBool) {
    return InvalidArgument("bool tensors cannot be scaled (prescale/postscale/Average)");
  }
  DADT_CUDA_CHECK("scale",
                  dadt_cuda::LaunchScale(buf, count, static_cast<int>(dtype), factor, stream_));
  return Status::OK();
}

Status CudaDevice::Divide(void* buf, int64_t count, DataType dtype, int64_t divisor) {
  if (count == 0) return Status::OK();
  if (dtype == DataType::kBool) return InvalidArgument("cannot average a bool tensor");
  DADT_CUDA_CHECK("average",
                  dadt_cuda::LaunchDivide(buf, count, static_cast<int>(dtype), divisor, stream_));
  return Status::OK();
}

Status CudaDevice::Cast(const void* in, DataType in_type, void* out, DataType out_type,
                        int64_t count) {
  return internal::CastOnStream(in, in_type, out, out_type, count, stream());
}

StatusOr<std::shared_ptr<void>> CudaDevice::Allocate(int64_t bytes, Use use) {
  if (bytes <= 0) return std::shared_ptr<void>();
  DADT_CUDA_CHECK("set device", cudaSetDevice(options_.device));
  void* p = nullptr;
  if (use == Use::kOutput) {
    // cudaFree waits for the device, so the framework's streams are done with the memory.
    DADT_CUDA_CHECK("allocate output", cudaMalloc(&p, static_cast<size_t>(bytes)));
    const int device = options_.device;
    return std::shared_ptr<void>(p, [device](void* q) {
      int current = 0;
      (void)cudaGetDevice(&current);
      (void)cudaSetDevice(device);
      (void)cudaFree(q);
      (void)cudaSetDevice(current);
    });
  }
  // Stream-ordered: usable by work on stream_ at once; the free waits for that work on the device.
  DADT_CUDA_CHECK("allocate scratch", cudaMallocAsync(&p, static_cast<size_t>(bytes), stream_));
  cudaStream_t s = stream_;
  return std::shared_ptr<void>(p, [s](void* q) { (void)cudaFreeAsync(q, s); });
}

namespace {

// Runs on CUDA's callback thread when the stream reaches it (no CUDA calls allowed there): marks
// the sequence number reached and wakes the completion thread at once.
void CUDART_CB SignalReached(void* arg) {
  auto* p = static_cast<std::pair<std::shared_ptr<CudaDevice::Reached>, uint64_t>*>(arg);
  {
    std::lock_guard<std::mutex> lock(p->first->mu);
    p->first->count = std::max(p->first->count, p->second);
  }
  p->first->cv.notify_all();
  delete p;
}

}  // namespace

void CudaDevice::OnComplete(std::function<void(Status)> done) {
  Status st = DADT_CUDA_STATUS("set device", cudaSetDevice(options_.device));
  cudaEvent_t event = nullptr;
  if (st.ok()) {
    auto e = TakeEvent();
    st = e.status();
    if (st.ok()) {
      event = *e;
      st = DADT_CUDA_STATUS("record completion", cudaEventRecord(event, stream_));
    }
  }
  const uint64_t seq = ++issued_;
  if (st.ok()) {
    auto* arg = new std::pair<std::shared_ptr<Reached>, uint64_t>(reached_, seq);
    st = DADT_CUDA_STATUS("completion callback", cudaLaunchHostFunc(stream_, SignalReached, arg));
    if (!st.ok()) delete arg;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok() && failed_.ok()) failed_ = st;
    pending_.push_back(Pending{event, std::move(done), std::chrono::steady_clock::now(), seq});
  }
  cv_.notify_all();
}

bool CudaDevice::WaitReached(uint64_t seq, std::chrono::microseconds at_most) {
  std::unique_lock<std::mutex> lock(reached_->mu);
  return reached_->cv.wait_for(lock, at_most, [&] { return reached_->count >= seq; });
}

void CudaDevice::CompletionLoop() {
  (void)cudaSetDevice(options_.device);
  std::unique_lock<std::mutex> lock(mu_);
  auto since = std::chrono::steady_clock::now();
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping with nothing left
    Pending& p = pending_.front();
    Status result = failed_;
    bool finished = !result.ok();
    if (!finished) {
      // Woken by the stream's callback as soon as the work is done; every kHealthPeriod without
      // it, look for the engine's asynchronous errors, a device error and the timeout.
      const cudaEvent_t event = p.event;
      const uint64_t seq = p.seq;
      const auto queued = p.queued;
      lock.unlock();
      finished = WaitReached(seq, kHealthPeriod);
      cudaError_t q = cudaSuccess;
      Status health;
      if (!finished) {
        q = cudaEventQuery(event);
        finished = q == cudaSuccess;
        if (!finished && options_.health) health = options_.health();
      }
      lock.lock();
      if (finished) {
      } else if (q != cudaErrorNotReady) {
        result = DADT_CUDA_STATUS("device work", q);
      } else if (!health.ok()) {
        result = health;
      } else if (std::chrono::steady_clock::now() - std::max(since, queued) > options_.timeout) {
        result = TimeoutError("GPU collective did not finish within " +
                              std::to_string(options_.timeout.count()) +
                              " ms (a peer is probably stuck or gone); the communicator is aborted");
      } else if (stopping_ && std::chrono::steady_clock::now() - stop_time_ > kShutdownGrace) {
        result = Aborted("dadt was shut down while GPU work was still in flight");
      }
      if (!result.ok()) {
        finished = true;
        if (failed_.ok()) {
          failed_ = result;
          if (options_.on_failure) {
            lock.unlock();
            options_.on_failure();
            lock.lock();
          }
        }
      }
    }
    if (!finished) continue;
    Pending done = std::move(pending_.front());
    pending_.pop_front();
    // An event whose work failed may still be pending on the device: do not reuse it.
    if (done.event && result.ok()) returned_events_.push_back(done.event);
    lock.unlock();
    done.done(result);
    lock.lock();
    since = std::chrono::steady_clock::now();
  }
}

namespace {

const bool kRegistered = DeviceRegistry::Register(DeviceRegistry::Impl{
    "CUDA", [](std::string* why) { return internal::VisibleCudaDevices(why); },
    [](const DeviceOptions& o) { return CudaDevice::Create(o); }, internal::CastOnStream,
    internal::CopyOnStream, [] {
      int version = 0;
      return ncclGetVersion(&version) == ncclSuccess ? version : 0;
    },
    [](DataType dtype, ReduceOp op) {
      ncclDataType_t type;
      ncclRedOp_t nccl_op;
      return internal::NcclTypeAndOp(dtype, op, &type, &nccl_op);
    }});

}  // namespace
}  // namespace nccl
}  // namespace backends
}  // namespace dadt
