#include "runtime/core/device_executor.h"

#include <algorithm>

#include "runtime/core/op_layout.h"

namespace dadt {
namespace core {

StatusOr<std::unique_ptr<DeviceExecutor>> DeviceExecutor::Create(const std::string& engine,
                                                                 int device,
                                                                 backends::BackendOptions options,
                                                                 Completer complete) {
  std::unique_ptr<DeviceExecutor> x(
      new DeviceExecutor(options.size, options.rank, std::move(complete)));
  backends::DeviceOptions dopts;
  dopts.device = device;
  dopts.timeout = options.timeout;
  // The completion thread asks the engine for asynchronous errors and aborts it on failure; the
  // engine exists by the time any work is outstanding, and outlives the context (member order).
  DeviceExecutor* self = x.get();
  dopts.health = [self]() { return self->backend_ ? self->backend_->AsyncError() : Status::OK(); };
  dopts.on_failure = [self]() {
    if (self->backend_) self->backend_->Abort();
  };
  auto ctx = backends::DeviceRegistry::Create(dopts);
  if (!ctx.ok()) return ctx.status();
  x->device_ = std::move(*ctx);
  options.device = device;
  options.device_stream = x->device_->stream();
  auto backend = backends::BackendRegistry::Create(engine, options);
  if (!backend.ok()) return backend.status();
  x->backend_ = std::move(*backend);
  return x;
}

DeviceExecutor::~DeviceExecutor() {
  fusion_.reset();  // its free is ordered on the context's stream, which must still exist
  device_.reset();  // drains the outstanding work; then the engine goes (member order)
}

StatusOr<void*> DeviceExecutor::Fusion(int64_t bytes) {
  if (bytes > fusion_bytes_) {
    // Grow geometrically so that a slowly growing bucket does not reallocate every step.
    const int64_t want = std::max(bytes, fusion_bytes_ + fusion_bytes_ / 2);
    auto mem = device_->Allocate(want, backends::DeviceContext::Use::kScratch);
    if (!mem.ok()) return mem.status();
    fusion_ = std::move(*mem);  // the old buffer's free is stream-ordered after its last use
    fusion_bytes_ = want;
  }
  return fusion_.get();
}

StatusOr<std::unique_ptr<HostBuffer>> DeviceExecutor::AllocateOutput(DataType dtype, Shape shape) {
  auto out = std::make_unique<HostBuffer>();
  out->dtype = dtype;
  out->bytes = NumElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
  out->shape = std::move(shape);
  out->device = device_->device();
  auto mem = device_->Allocate(out->bytes, backends::DeviceContext::Use::kOutput);
  if (!mem.ok()) return mem.status();
  out->device_data = std::move(*mem);
  return out;
}

Status DeviceExecutor::PostProcess(const Response& r, void* buf, int64_t n) {
  DADT_RETURN_IF_ERROR(device_->Scale(buf, n, r.dtype, r.postscale));
  if (r.reduce_op != ReduceOp::kAverage || size_ == 1 || n == 0) return Status::OK();
  return device_->Divide(buf, n, r.dtype, size_);
}

Status DeviceExecutor::Execute(const Response& r, const std::vector<TensorEntry*>& mine) {
  // 1. Order everything after the framework streams the inputs were produced on.
  std::vector<uintptr_t> streams;
  for (const TensorEntry* e : mine) {
    if (e && std::find(streams.begin(), streams.end(), e->stream) == streams.end()) {
      streams.push_back(e->stream);
    }
  }
  Status s;
  for (uintptr_t st : streams) {
    if (s.ok()) s = device_->WaitForStream(st);
  }
  // 2. Enqueue the op; each result is completed by the completion thread below.
  struct Done {
    std::string name;
    int64_t handle;
    std::shared_ptr<HandleResult> result;
  };
  std::vector<Done> done;
  if (s.ok() && r.type == Response::Type::kAllreduce) {
    s = Allreduce(r, mine);
    for (const TensorEntry* e : mine) {
      if (e) done.push_back({e->request.name, e->handle, std::make_shared<HandleResult>()});
    }
  } else if (s.ok()) {
    for (const TensorEntry* e : mine) {
      if (!e) continue;
      auto res = std::make_shared<HandleResult>();
      StatusOr<std::unique_ptr<HostBuffer>> out = std::unique_ptr<HostBuffer>();
      switch (r.type) {
        case Response::Type::kAllgather: out = Allgather(r, *e); break;
        case Response::Type::kBroadcast: s = Broadcast(r, *e); break;
        case Response::Type::kAlltoall: out = Alltoall(r, *e, &res->received_splits); break;
        case Response::Type::kReducescatter: out = Reducescatter(r, *e); break;
        default: s = InternalError("unexpected GPU response type"); break;
      }
      if (s.ok()) s = out.status();
      if (s.ok()) res->output = std::move(*out);
      done.push_back({e->request.name, e->handle, std::move(res)});
      if (!s.ok()) break;
    }
  }
  if (!s.ok()) {
    // Complete every entry now, those already enqueued included: their work cannot be trusted.
    for (const TensorEntry* e : mine) {
      if (!e) continue;
      HandleResult res;
      res.status = s;
      complete_(e->request.name, e->handle, std::move(res));
    }
    return s;
  }
  // 3. The handles complete once the device has passed this point.
  device_->OnComplete([done = std::move(done), complete = complete_](Status status) {
    for (const Done& d : done) {
      HandleResult res = std::move(*d.result);
      res.status = status;
      if (!status.ok()) res.output.reset();
      complete(d.name, d.handle, std::move(res));
    }
  });
  return Status::OK();
}

Status DeviceExecutor::Allreduce(const Response& r, const std::vector<TensorEntry*>& mine) {
  const int64_t esize = static_cast<int64_t>(DataTypeSize(r.dtype));
  int64_t total = 0;
  for (int64_t n : r.sizes) total += n;
  void* buf;
  const bool fused = r.names.size() > 1 || mine[0] == nullptr;
  std::vector<backends::CopySpan> in, out;
  if (!fused) {
    buf = mine[0]->output;
    if (mine[0]->input != buf) in.push_back({mine[0]->input, buf, total * esize});
  } else {
    auto f = Fusion(total * esize);
    if (!f.ok()) return f.status();
    buf = *f;
    int64_t off = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      const int64_t bytes = r.sizes[i] * esize;
      char* slot = static_cast<char*>(buf) + off;
      // A joined rank contributes zeros (a null source is a zero fill).
      in.push_back({mine[i] ? mine[i]->input : nullptr, slot, bytes});
      if (mine[i]) out.push_back({slot, mine[i]->output, bytes});
      off += bytes;
    }
  }
  DADT_RETURN_IF_ERROR(device_->Copy(in));
  DADT_RETURN_IF_ERROR(device_->Scale(buf, total, r.dtype, r.prescale));
  if (total > 0) {
    DADT_RETURN_IF_ERROR(backend_->Allreduce(buf, total, r.dtype, BackendOp(r.reduce_op)));
  }
  DADT_RETURN_IF_ERROR(PostProcess(r, buf, total));
  return device_->Copy(out);
}

StatusOr<std::unique_ptr<HostBuffer>> DeviceExecutor::Allgather(const Response& r,
                                                                const TensorEntry& e) {
  GatherLayout l = AllgatherLayout(e.request.shape, r.dtype, r.sizes, size_);
  auto out = AllocateOutput(r.dtype, l.out_shape);
  if (!out.ok()) return out.status();
  if ((*out)->bytes > 0) {
    DADT_RETURN_IF_ERROR(backend_->Allgatherv(e.input, (*out)->ptr(), l.bytes));
  }
  return out;
}

Status DeviceExecutor::Broadcast(const Response& r, const TensorEntry& e) {
  const int64_t bytes = e.request.ByteSize();
  if (bytes == 0) return Status::OK();
  if (rank_ == r.root && e.input != e.output) {
    DADT_RETURN_IF_ERROR(device_->Copy({{e.input, e.output, bytes}}));
  }
  return backend_->Broadcast(e.output, bytes, r.root);
}

StatusOr<std::unique_ptr<HostBuffer>> DeviceExecutor::Alltoall(const Response& r,
                                                               const TensorEntry& e,
                                                               std::vector<int64_t>* splits) {
  AlltoallLayout l = MakeAlltoallLayout(e.request.shape, r.dtype, r.sizes, size_, rank_);
  auto out = AllocateOutput(r.dtype, l.out_shape);
  if (!out.ok()) return out.status();
  DADT_RETURN_IF_ERROR(backend_->Alltoallv(e.input, l.send, (*out)->ptr(), l.recv));
  *splits = std::move(l.splits);
  return out;
}

StatusOr<std::unique_ptr<HostBuffer>> DeviceExecutor::Reducescatter(const Response& r,
                                                                    const TensorEntry& e) {
  const Shape& shape = e.request.shape;
  const int64_t d0 = shape.empty() ? 1 : shape[0];
  const std::vector<int64_t> counts = ScatterCounts(shape, size_);
  const int64_t total = d0 * RowElements(shape);
  const void* in = e.input;
  if (r.prescale != 1.0 && total > 0) {
    const int64_t bytes = total * static_cast<int64_t>(DataTypeSize(r.dtype));
    auto staged = Fusion(bytes);
    if (!staged.ok()) return staged.status();
    DADT_RETURN_IF_ERROR(device_->Copy({{e.input, *staged, bytes}}));
    DADT_RETURN_IF_ERROR(device_->Scale(*staged, total, r.dtype, r.prescale));
    in = *staged;
  }
  auto out = AllocateOutput(r.dtype, WithFirstDim(shape, ScatterRows(d0, size_, rank_)));
  if (!out.ok()) return out.status();
  if (total > 0) {
    DADT_RETURN_IF_ERROR(
        backend_->Reducescatter(in, (*out)->ptr(), counts, r.dtype, BackendOp(r.reduce_op)));
  }
  DADT_RETURN_IF_ERROR(PostProcess(r, (*out)->ptr(), counts[rank_]));
  return out;
}

}  // namespace core
}  // namespace dadt
