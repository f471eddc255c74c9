#include "runtime/core/executor.h"

#include <algorithm>

#include <cstring>

#include "runtime/backends/adasum.h"
#include "runtime/common/reduce.h"
#include "runtime/core/op_layout.h"

namespace dadt {
namespace core {
namespace {

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
    events_->Emit(timeline::Event{now, phase, timeline::TensorRow(OpTypeName(r.op), name), activity,
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

void Executor::Complete(TensorQueue* queue, HandleTable* handles, const std::string& name,
                        int64_t handle, HandleResult result) {
  queue->Finish(name);
  handles->Complete(handle, std::move(result));
}

void Executor::Finish(TensorEntry& entry, HandleResult result) {
  Complete(queue_, handles_, EntryKey(entry.request), entry.handle, std::move(result));
}

namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The engine only reads a send's buffer.
backends::PeerBuffer SendBuffer(int64_t peer, const void* data, int64_t bytes) {
  return {static_cast<int>(peer), const_cast<void*>(data), bytes};
}

}  // namespace

Status Executor::Execute(const Response& r, EntryMap& entries) {
  // A peer exchange is the business of the ranks in `sizes` only; another rank may hold an entry
  // of the same name that waits for a partner of its own.
  if (r.type == Response::Type::kPeerExchange && !Contains(r.sizes, rank_)) return Status::OK();
  const bool traced = events_ && events_->enabled() && r.type != Response::Type::kError &&
                      r.type != Response::Type::kJoin;
  const char* op_name = traced ? OpTypeName(*OpTypeFor(r.type)) : "";
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

void Executor::EnableDevice(const std::string& engine, const backends::BackendOptions& options) {
  device_engine_ = engine;
  device_options_ = options;
  device_options_.store_prefix = engine + "/";
}

bool Executor::MovesData(Response::Type t) {
  return t == Response::Type::kAllreduce || t == Response::Type::kAllgather ||
         t == Response::Type::kBroadcast || t == Response::Type::kAlltoall ||
         t == Response::Type::kReducescatter;
}

Status Executor::DeviceFor(int device, const std::string& name) {
  if (device_) {
    if (device >= 0 && device != device_->device()) {
      return InvalidArgument("dadt drives one GPU per process: tensor '" + name + "' is on cuda:" +
                             std::to_string(device) + " but earlier GPU tensors were on cuda:" +
                             std::to_string(device_->device()));
    }
    return Status::OK();
  }
  if (device_engine_.empty()) {
    return PreconditionFailed("tensor '" + name + "' is in GPU memory but this job has no GPU data "
                              "plane (the " + std::string(backend_->Name()) + " executor stages "
                              "GPU tensors through host memory in the front end; use "
                              "all_reduce_executor='nccl' for NCCL)");
  }
  if (device < 0) {  // a joined rank with no tensor of its own: the GPU of its local rank
    std::string why;
    const int n = backends::DeviceRegistry::VisibleDevices(&why);
    if (n == 0) return PreconditionFailed("GPU collective '" + name + "' needs a GPU: " + why);
    device = device_options_.local_rank % n;
  }
  auto created = DeviceExecutor::Create(
      device_engine_, device, device_options_,
      [queue = queue_, handles = handles_](const std::string& n, int64_t handle, HandleResult res) {
        Complete(queue, handles, n, handle, std::move(res));
      });
  if (!created.ok()) return created.status();
  device_ = std::move(*created);
  return Status::OK();
}

Status Executor::ExecuteOnDevice(const Response& r, EntryMap& entries) {
  std::vector<TensorEntry*> mine(r.names.size(), nullptr);
  int device = -1;
  for (size_t i = 0; i < r.names.size(); ++i) {
    auto it = entries.find(r.names[i]);
    if (it == entries.end()) continue;
    mine[i] = &it->second;
    if (device < 0) device = it->second.request.device;
  }
  Status s = DeviceFor(device, r.names[0]);
  const bool setup_failed = !s.ok();
  if (s.ok()) s = device_->Execute(r, mine);  // completes the entries itself, now or later
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!mine[i]) continue;
    if (setup_failed) {
      HandleResult res;
      res.status = s;
      Finish(*mine[i], std::move(res));
    }
    entries.erase(r.names[i]);
  }
  // A refused tensor (wrong device, no GPU data plane) fails its handles only; an engine that
  // failed to start or run breaks the job.
  if (setup_failed && (s.code() == StatusCode::kInvalidArgument ||
                       s.code() == StatusCode::kPreconditionFailed)) {
    return Status::OK();
  }
  return s;
}

Status Executor::ExecuteOne(const Response& r, EntryMap& entries) {
  if (MovesData(r.type) && !r.eager && r.device >= 0) return ExecuteOnDevice(r, entries);
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
    StatusOr<HandleResult> done = RunEntry(r, it->second);
    const Status broken = done.status();
    HandleResult result;
    if (broken.ok()) {
      result = std::move(*done);
    } else {
      result.status = broken;
    }
    Finish(it->second, std::move(result));
    entries.erase(it);
    if (!broken.ok()) return broken;
  }
  return Status::OK();
}

StatusOr<HandleResult> Executor::RunEntry(const Response& r, TensorEntry& e) {
  switch (r.type) {
    case Response::Type::kError: {  // delivered to this tensor; the job goes on
      HandleResult mismatch;
      mismatch.status = MismatchError(r.error);
      return mismatch;
    }
    case Response::Type::kAllgather: return Allgather(r, e);
    case Response::Type::kBroadcast: return Broadcast(r, e);
    case Response::Type::kAlltoall: return Alltoall(r, e);
    case Response::Type::kReducescatter: return Reducescatter(r, e);
    case Response::Type::kPeerExchange: return PeerExchange(r, e);
    case Response::Type::kNeighborAllgather: return NeighborAllgather(r, e);
    case Response::Type::kBarrier: return HandleResult{};
    case Response::Type::kProcessSetAdd: {  // applied to the table before (SetBackends)
      HandleResult added;
      added.int_result = r.root;
      return added;
    }
    case Response::Type::kProcessSetRemove: {
      HandleResult removed;
      removed.int_result = r.sizes.empty() ? 0 : r.sizes[0];
      return removed;
    }
    default: return InternalError("unexpected response type");
  }
}

Status Executor::Allreduce(const Response& r, EntryMap& entries) {
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
  const bool adasum = r.reduce_op == ReduceOp::kAdasum;
  const std::string collective =
      events_ && events_->enabled()
          ? timeline::BackendActivity(backend_->Name(), adasum ? "adasum" : "allreduce")
          : "";
  Status s;
  if (backend_->ReducesPieces() && r.prescale == 1.0 && !adasum) {
    // The engine reads the tensors and writes the results where they lie (shared memory on one
    // host): no fusion buffer, no copy of an out-of-place input, no pass for the epilogue.
    std::vector<backends::AllreducePiece> pieces(mine.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      pieces[i].count = r.sizes[i];
      if (mine[i]) pieces[i].in = mine[i]->input, pieces[i].out = mine[i]->output;
    }
    const backends::AllreduceEpilogue epilogue{r.postscale,
                                               r.reduce_op == ReduceOp::kAverage ? size_ : 1};
    Mark(r.names, collective, timeline::Phase::kBegin, entries);
    if (total > 0) s = backend_->AllreducePieces(pieces, r.dtype, BackendOp(r.reduce_op), epilogue);
    Mark(r.names, collective, timeline::Phase::kEnd, entries);
  } else {
    s = AllreduceThroughBuffer(r, mine, total, collective, entries);
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

Status Executor::AllreduceThroughBuffer(const Response& r, const std::vector<TensorEntry*>& mine, int64_t total,
                                        const std::string& collective, const EntryMap& entries) {
  const int64_t esize = static_cast<int64_t>(DataTypeSize(r.dtype));
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
  Mark(r.names, collective, timeline::Phase::kBegin, entries);
  if (s.ok() && total > 0) {
    if (r.reduce_op == ReduceOp::kAdasum) {
      // Tags from the coordinator's point-to-point sequence (r.root); a second buffer for what
      // the partner of each level holds.
      const int64_t bytes = total * esize;
      if (bytes > adasum_scratch_bytes_) {
        adasum_scratch_.reset(new uint8_t[bytes]);
        adasum_scratch_bytes_ = bytes;
      }
      s = backends::AdasumAllreduce(backend_, buf, adasum_scratch_.get(), r.sizes, r.dtype, rank_,
                                    size_, static_cast<uint32_t>(r.root));
    } else {
      s = backend_->Allreduce(buf, total, r.dtype, BackendOp(r.reduce_op));
    }
  }
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
  return s;
}

StatusOr<HandleResult> Executor::Allgather(const Response& r, TensorEntry& e) {
  GatherLayout l = AllgatherLayout(e.request.shape, r.dtype, r.sizes, size_);
  HandleResult res;
  int64_t total = 0;
  for (int64_t n : l.bytes) total += n;
  auto out = ResultBuffer(e, r.dtype, l.out_shape, total, &res.output);
  if (!out.ok()) {
    // The caller's output has the wrong size. The other ranks are in this collective already:
    // take part through a scratch buffer so that they finish, and fail this tensor only.
    auto scratch = HostBuffer::Allocate(r.dtype, l.out_shape);
    DADT_RETURN_IF_ERROR(backend_->Allgatherv(e.input, scratch->data.get(), l.bytes));
    res.status = out.status();
    return res;
  }
  DADT_RETURN_IF_ERROR(backend_->Allgatherv(e.input, *out, l.bytes));
  return res;
}

StatusOr<HandleResult> Executor::PeerExchange(const Response& r, TensorEntry& e) {
  HandleResult res;
  if (r.sizes.size() == 2) res.int_result = r.sizes[0] == rank_ ? r.sizes[1] : r.sizes[0];
  if (!r.error.empty()) {  // a mismatch between the two: delivered to this tensor; the job goes on
    res.status = MismatchError(r.error);
    return res;
  }
  const int64_t partner = res.int_result;
  if (partner < 0) return res;  // withdrawn, or a withdraw answered: no partner, output untouched
  const Request& q = e.request;
  const int64_t bytes = q.ByteSize();
  std::vector<backends::PeerBuffer> sends, recvs;
  if (Contains(q.send_ranks, partner)) sends.push_back(SendBuffer(partner, e.input, bytes));
  if (Contains(q.recv_ranks, partner)) recvs.push_back({static_cast<int>(partner), e.output, bytes});
  DADT_RETURN_IF_ERROR(backend_->Exchange(sends, recvs, static_cast<uint32_t>(r.root)));
  return res;
}

StatusOr<HandleResult> Executor::NeighborAllgather(const Response& r, TensorEntry& e) {
  const Request& q = e.request;
  const int64_t bytes = q.ByteSize();
  std::vector<backends::PeerBuffer> sends, recvs;
  for (int64_t to : q.send_ranks) sends.push_back(SendBuffer(to, e.input, bytes));
  char* out = static_cast<char*>(e.output);
  for (size_t i = 0; i < q.recv_ranks.size(); ++i) {
    recvs.push_back({static_cast<int>(q.recv_ranks[i]), out + i * bytes, bytes});
  }
  DADT_RETURN_IF_ERROR(backend_->Exchange(sends, recvs, static_cast<uint32_t>(r.root)));
  return HandleResult{};
}

StatusOr<HandleResult> Executor::Broadcast(const Response& r, TensorEntry& e) {
  const int64_t bytes = e.request.ByteSize();
  if (rank_ == r.root && e.input != e.output && bytes) std::memcpy(e.output, e.input, bytes);
  if (bytes > 0) DADT_RETURN_IF_ERROR(backend_->Broadcast(e.output, bytes, r.root));
  return HandleResult{};
}

StatusOr<HandleResult> Executor::Alltoall(const Response& r, TensorEntry& e) {
  AlltoallLayout l = MakeAlltoallLayout(e.request.shape, r.dtype, r.sizes, size_, rank_);
  auto out = HostBuffer::Allocate(r.dtype, l.out_shape);
  DADT_RETURN_IF_ERROR(backend_->Alltoallv(e.input, l.send, out->data.get(), l.recv));
  HandleResult res;
  res.output = std::move(out);
  res.received_splits = std::move(l.splits);
  return res;
}

StatusOr<HandleResult> Executor::Reducescatter(const Response& r, TensorEntry& e) {
  const Shape& shape = e.request.shape;
  const int64_t d0 = shape.empty() ? 1 : shape[0];
  const std::vector<int64_t> counts = ScatterCounts(shape, size_);
  const void* in = e.input;
  const int64_t total = d0 * RowElements(shape);
  if (r.prescale != 1.0 && total > 0) {
    uint8_t* staged = FusionBuffer(total * static_cast<int64_t>(DataTypeSize(r.dtype)));
    std::memcpy(staged, e.input, total * DataTypeSize(r.dtype));
    DADT_RETURN_IF_ERROR(Scale(staged, total, r.dtype, r.prescale));
    in = staged;
  }
  const int64_t my_rows = ScatterRows(d0, size_, rank_);
  HandleResult res;
  auto out = ResultBuffer(e, r.dtype, WithFirstDim(shape, my_rows),
                          counts[rank_] * static_cast<int64_t>(DataTypeSize(r.dtype)), &res.output);
  if (!out.ok()) {  // as in Allgather: take part, then fail this tensor only
    auto scratch = HostBuffer::Allocate(r.dtype, WithFirstDim(shape, my_rows));
    DADT_RETURN_IF_ERROR(backend_->Reducescatter(in, scratch->data.get(), counts, r.dtype,
                                                 BackendOp(r.reduce_op)));
    res.status = out.status();
    return res;
  }
  DADT_RETURN_IF_ERROR(backend_->Reducescatter(in, *out, counts, r.dtype, BackendOp(r.reduce_op)));
  DADT_RETURN_IF_ERROR(PostProcess(r, size_, *out, counts[rank_]));
  return res;
}

}  // namespace core
}  // namespace dadt
