#include "runtime/core/executor.h"

#include <cstring>

#include "runtime/common/reduce.h"

namespace dadt {
namespace core {
namespace {

int64_t RowElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

Shape WithFirstDim(const Shape& shape, int64_t first) {
  Shape s = shape.empty() ? Shape{first} : shape;
  s[0] = first;
  return s;
}

// The destination of an allgather / reducescatter of `bytes` bytes: the caller's output when it
// gave one (of exactly that size), else a new runtime buffer put in *owned.
StatusOr<void*> ResultBuffer(const TensorEntry& e, DataType dtype, const Shape& shape, int64_t bytes,
                             std::unique_ptr<HostBuffer>* owned) {
  if (e.output == nullptr) {
    *owned = HostBuffer::Allocate(dtype, shape);
    return static_cast<void*>((*owned)->data.get());
  }
  if (e.output_bytes != bytes) {
    return InvalidArgument("output of '" + e.request.name + "' holds " + std::to_string(e.output_bytes) +
                           " bytes; the " + OpTypeName(e.request.op) + " result " + ShapeString(shape) +
                           " needs " + std::to_string(bytes));
  }
  return e.output;
}

ReduceOp BackendOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

Status Scale(void* buf, int64_t n, DataType dtype, double factor) {
  if (factor == 1.0 || n == 0) return Status::OK();
  return ScaleBuffer(buf, n, dtype, factor);
}

// Postscale, then Average's division by the number of ranks.
Status PostProcess(const Response& r, int size, void* buf, int64_t n) {
  DADT_RETURN_IF_ERROR(Scale(buf, n, r.dtype, r.postscale));
  if (r.reduce_op != ReduceOp::kAverage || size == 1 || n == 0) return Status::OK();
  return DivideBuffer(buf, n, r.dtype, size);
}

}  // namespace

Executor::Executor(backends::Backend* backend, int rank, int size, HandleTable* handles,
                   TensorQueue* queue, const timeline::EventStream* events)
    : backend_(backend),
      rank_(rank),
      size_(size),
      handles_(handles),
      queue_(queue),
      events_(events) {}

void Executor::Mark(const std::vector<std::string>& names, const std::string& activity,
                    timeline::Phase phase, const EntryMap& entries, bool with_args) {
  if (!events_ || !events_->enabled()) return;
  const int64_t now = timeline::NowMicros();
  for (const std::string& name : names) {
    auto it = entries.find(name);
    if (it == entries.end()) continue;
    const Request& r = it->second.request;
    events_->Emit(timeline::Event{now, phase, name, activity,
                                  with_args ? timeline::TensorArgs(DataTypeName(r.dtype), r.shape)
                                            : std::string()});
  }
}

uint8_t* Executor::FusionBuffer(int64_t bytes) {
  if (bytes > fusion_bytes_) {
    fusion_.reset(new uint8_t[bytes]);
    fusion_bytes_ = bytes;
  }
  return fusion_.get();
}

void Executor::Finish(TensorEntry& entry, HandleResult result) {
  queue_->Finish(entry.request.name);
  handles_->Complete(entry.handle, std::move(result));
}

Status Executor::Execute(const Response& r, EntryMap& entries) {
  const bool traced = events_ && events_->enabled() && r.type != Response::Type::kError &&
                      r.type != Response::Type::kJoin;
  // Response::Type lists the op types first, in OpType's order.
  const char* op_name = traced ? OpTypeName(static_cast<OpType>(r.type)) : "";
  // Allreduce marks its own collective phase (it sits between the fusion-buffer copies).
  const bool wrap = traced && r.type != Response::Type::kAllreduce;
  std::string op, collective;
  std::vector<std::string> names;
  if (traced) {
    op = timeline::OpActivity(op_name);
    collective = timeline::BackendActivity(backend_->Name(), op_name);
    names = r.names;
    Mark(names, op, timeline::Phase::kBegin, entries);
    if (wrap) Mark(names, collective, timeline::Phase::kBegin, entries);
  }
  // Entries are consumed during execution; keep what the end events need.
  EntryMap ends;
  if (traced) {
    for (const std::string& n : names) {
      auto it = entries.find(n);
      if (it != entries.end()) ends.emplace(n, TensorEntry{it->second.request, nullptr, nullptr, -1, 0});
    }
  }
  Status s = ExecuteOne(r, entries);
  if (traced) {
    if (wrap) Mark(names, collective, timeline::Phase::kEnd, ends);
    Mark(names, op, timeline::Phase::kEnd, ends, /*with_args=*/true);
  }
  return s;
}

Status Executor::ExecuteOne(const Response& r, EntryMap& entries) {
  if (r.type == Response::Type::kAllreduce) return Allreduce(r, entries);
  if (r.type == Response::Type::kJoin) {
    auto it = entries.find(kJoinName);
    if (it != entries.end()) {
      HandleResult res;
      res.int_result = r.last_joined_rank;
      Finish(it->second, std::move(res));
      entries.erase(it);
    }
    return Status::OK();
  }
  for (const std::string& name : r.names) {
    auto it = entries.find(name);
    if (it == entries.end()) continue;  // a joined rank is not part of this one
    TensorEntry& e = it->second;
    Status s;
    switch (r.type) {
      case Response::Type::kError: s = MismatchError(r.error); break;
      case Response::Type::kAllgather: s = Allgather(r, e); break;
      case Response::Type::kBroadcast: s = Broadcast(r, e); break;
      case Response::Type::kAlltoall: s = Alltoall(r, e); break;
      case Response::Type::kReducescatter: s = Reducescatter(r, e); break;
      case Response::Type::kBarrier: break;
      default: s = InternalError("unexpected response type"); break;
    }
    // Successful allocating ops completed the handle themselves (with their output).
    if (!s.ok() || r.type == Response::Type::kBarrier || r.type == Response::Type::kBroadcast) {
      HandleResult res;
      res.status = s;
      Finish(e, std::move(res));
    }
    entries.erase(it);
    if (!s.ok() && r.type != Response::Type::kError) return s;
  }
  return Status::OK();
}

Status Executor::Allreduce(const Response& r, EntryMap& entries) {
  const int64_t esize = static_cast<int64_t>(DataTypeSize(r.dtype));
  if (r.eager) {  // the coordinator already reduced it (eager_reduce.h): copy the result out
    auto it = entries.find(r.names[0]);
    if (it == entries.end()) return Status::OK();
    Mark(r.names, "EAGER_ALLREDUCE", timeline::Phase::kBegin, entries);
    if (!r.data.empty()) std::memcpy(it->second.output, r.data.data(), r.data.size());
    Mark(r.names, "EAGER_ALLREDUCE", timeline::Phase::kEnd, entries);
    Finish(it->second, HandleResult{});
    entries.erase(it);
    return Status::OK();
  }
  int64_t total = 0;
  for (int64_t n : r.sizes) total += n;
  std::vector<TensorEntry*> mine(r.names.size(), nullptr);
  for (size_t i = 0; i < r.names.size(); ++i) {
    auto it = entries.find(r.names[i]);
    if (it != entries.end()) mine[i] = &it->second;
  }
  uint8_t* buf;
  const bool fused = r.names.size() > 1 || mine[0] == nullptr;
  if (!fused) {
    TensorEntry& e = *mine[0];
    buf = static_cast<uint8_t*>(e.output);
    if (e.input != e.output && total > 0) std::memcpy(buf, e.input, total * esize);
  } else {
    buf = FusionBuffer(total * esize);
    Mark(r.names, timeline::kMemcpyInFusionBuffer, timeline::Phase::kBegin, entries);
    int64_t off = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      const int64_t bytes = r.sizes[i] * esize;
      if (mine[i]) {
        if (bytes) std::memcpy(buf + off, mine[i]->input, bytes);
      } else if (bytes) {
        std::memset(buf + off, 0, bytes);
      }
      off += bytes;
    }
    Mark(r.names, timeline::kMemcpyInFusionBuffer, timeline::Phase::kEnd, entries);
  }
  Status s = Scale(buf, total, r.dtype, r.prescale);
  const std::string collective =
      events_ && events_->enabled() ? timeline::BackendActivity(backend_->Name(), "allreduce") : "";
  Mark(r.names, collective, timeline::Phase::kBegin, entries);
  if (s.ok() && total > 0) s = backend_->Allreduce(buf, total, r.dtype, BackendOp(r.reduce_op));
  Mark(r.names, collective, timeline::Phase::kEnd, entries);
  if (s.ok()) s = PostProcess(r, size_, buf, total);
  if (s.ok() && fused) {
    Mark(r.names, timeline::kMemcpyOutFusionBuffer, timeline::Phase::kBegin, entries);
    int64_t off = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      const int64_t bytes = r.sizes[i] * esize;
      if (mine[i] && bytes) std::memcpy(mine[i]->output, buf + off, bytes);
      off += bytes;
    }
    Mark(r.names, timeline::kMemcpyOutFusionBuffer, timeline::Phase::kEnd, entries);
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!mine[i]) continue;
    HandleResult res;
    res.status = s;
    Finish(*mine[i], std::move(res));
    entries.erase(r.names[i]);
  }
  return s;
}

Status Executor::Allgather(const Response& r, TensorEntry& e) {
  const Shape& shape = e.request.shape;
  const int64_t row_bytes = RowElements(shape) * static_cast<int64_t>(DataTypeSize(r.dtype));
  std::vector<int64_t> bytes(size_);
  int64_t rows = 0;
  for (int i = 0; i < size_; ++i) {
    bytes[i] = r.sizes[i] * row_bytes;
    rows += r.sizes[i];
  }
  HandleResult res;
  auto out = ResultBuffer(e, r.dtype, WithFirstDim(shape, rows), rows * row_bytes, &res.output);
  if (!out.ok()) return out.status();
  DADT_RETURN_IF_ERROR(backend_->Allgatherv(e.input, *out, bytes));
  Finish(e, std::move(res));
  return Status::OK();
}

Status Executor::Broadcast(const Response& r, TensorEntry& e) {
  const int64_t bytes = e.request.ByteSize();
  if (rank_ == r.root && e.input != e.output && bytes) std::memcpy(e.output, e.input, bytes);
  if (bytes == 0) return Status::OK();
  return backend_->Broadcast(e.output, bytes, r.root);
}

Status Executor::Alltoall(const Response& r, TensorEntry& e) {
  const Shape& shape = e.request.shape;
  const int64_t row_bytes = RowElements(shape) * static_cast<int64_t>(DataTypeSize(r.dtype));
  std::vector<int64_t> send(size_), recv(size_), splits(size_);
  int64_t rows = 0;
  for (int j = 0; j < size_; ++j) {
    send[j] = r.sizes[rank_ * size_ + j] * row_bytes;
    splits[j] = r.sizes[j * size_ + rank_];
    recv[j] = splits[j] * row_bytes;
    rows += splits[j];
  }
  auto out = HostBuffer::Allocate(r.dtype, WithFirstDim(shape, rows));
  DADT_RETURN_IF_ERROR(backend_->Alltoallv(e.input, send, out->data.get(), recv));
  HandleResult res;
  res.output = std::move(out);
  res.received_splits = std::move(splits);
  Finish(e, std::move(res));
  return Status::OK();
}

Status Executor::Reducescatter(const Response& r, TensorEntry& e) {
  const Shape& shape = e.request.shape;
  const int64_t d0 = shape.empty() ? 1 : shape[0];
  const int64_t row = RowElements(shape);
  std::vector<int64_t> counts(size_);
  for (int i = 0; i < size_; ++i) counts[i] = (d0 / size_ + (i < d0 % size_ ? 1 : 0)) * row;
  const void* in = e.input;
  const int64_t total = d0 * row;
  if (r.prescale != 1.0 && total > 0) {
    uint8_t* staged = FusionBuffer(total * static_cast<int64_t>(DataTypeSize(r.dtype)));
    std::memcpy(staged, e.input, total * DataTypeSize(r.dtype));
    DADT_RETURN_IF_ERROR(Scale(staged, total, r.dtype, r.prescale));
    in = staged;
  }
  const int64_t my_rows = d0 / size_ + (rank_ < d0 % size_ ? 1 : 0);
  HandleResult res;
  auto out = ResultBuffer(e, r.dtype, WithFirstDim(shape, my_rows),
                          counts[rank_] * static_cast<int64_t>(DataTypeSize(r.dtype)), &res.output);
  if (!out.ok()) return out.status();
  DADT_RETURN_IF_ERROR(backend_->Reducescatter(in, *out, counts, r.dtype, BackendOp(r.reduce_op)));
  DADT_RETURN_IF_ERROR(PostProcess(r, size_, *out, counts[rank_]));
  Finish(e, std::move(res));
  return Status::OK();
}

}  // namespace core
}  // namespace dadt
