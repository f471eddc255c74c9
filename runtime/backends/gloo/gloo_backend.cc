#include "runtime/backends/gloo/gloo_backend.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "runtime/backends/gloo/gloo_error.h"
#include "runtime/backends/gloo/mesh.h"
#include "runtime/backends/gloo/peer_watchdog.h"
#include "runtime/backends/gloo/ring.h"
#include "runtime/backends/shm/shm_allreduce.h"
#include "runtime/backends/gloo/store_adapter.h"
#include "runtime/backends/gloo/tracked_transport.h"
#include "runtime/common/logging.h"
#include "runtime/common/reduce.h"
#include "runtime/common/thread_priority.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace {

// How often a running collective checks its peers (see peer_watchdog.h): the longest a dead peer
// can go unnoticed, against ten cheap probes a second while collectives run.
constexpr std::chrono::milliseconds kPeerProbeInterval(100);

// The link probe (MeasureLink): every rank sends 2 MiB in all per round, in 1 MiB segments
// (so the probe itself is neither per-segment- nor queue-bound on a fast or a slow link), and the
// fastest of three rounds counts, the first paying for the connections' slow start. At 1 Gbit/s
// that costs about 55 ms when the backend connects.
constexpr int64_t kLinkProbeBytes = int64_t{2} << 20;
constexpr int64_t kLinkProbeMinBlock = int64_t{64} << 10;
constexpr int64_t kLinkProbeSegmentBytes = int64_t{1} << 20;
constexpr int kLinkProbeRounds = 3;

// Gloo's TCP pairs write with writev(2), not send(2) with MSG_NOSIGNAL, so writing to a connection
// whose peer has died raises SIGPIPE, and its default action kills this process before Gloo can
// report EPIPE: one dead rank would take every neighbour with it, silently (the peer-kill test
// caught exactly that). A dead peer must become kAborted, so we ignore SIGPIPE -- but only where
// nobody has installed a disposition of their own (Python, for one, already ignores it).
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

::gloo::AllreduceOptions::Func ReduceFunction(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kFloat32 && op == ReduceOp::kSum) {
    // The very function raw Gloo users pass, so this path is raw Gloo's speed by construction.
    return static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<float>);
  }
  return [dtype, op](void* out, const void* a, const void* b, size_t n) {
    ReduceBinary(out, a, b, static_cast<int64_t>(n), dtype, op);
  };
}

// AllreduceOptions derives the element size from the pointer type.
void SetAllreduceBuffer(::gloo::AllreduceOptions& opts, void* buf, int64_t count, size_t width) {
  switch (width) {
    case 1: return opts.setOutput(static_cast<uint8_t*>(buf), count);
    case 2: return opts.setOutput(static_cast<uint16_t*>(buf), count);
    case 4: return opts.setOutput(static_cast<uint32_t*>(buf), count);
    default: return opts.setOutput(static_cast<uint64_t*>(buf), count);
  }
}

[[maybe_unused]] const bool kRegistered = BackendRegistry::Register("gloo", &GlooBackend::Create);

}  // namespace

StatusOr<std::unique_ptr<Backend>> GlooBackend::Create(const BackendOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("gloo backend: bad rank " + std::to_string(options.rank) +
                           " for size " + std::to_string(options.size));
  }
  if (options.timeout.count() <= 0) return InvalidArgument("gloo backend: timeout must be > 0");
  if (options.size == 1) {
    return std::unique_ptr<Backend>(new GlooBackend(options, nullptr, nullptr));
  }
  if (options.store == nullptr) {
    return InvalidArgument("gloo backend: size " + std::to_string(options.size) +
                           " needs a rendezvous store");
  }
  IgnoreSigpipeUnlessHandled();
  auto registry = std::make_shared<internal::BufferRegistry>();
  StatusOr<internal::Mesh> mesh = internal::ConnectMesh(options, registry);
  if (!mesh.ok()) return mesh.status();
  std::unique_ptr<GlooBackend> backend(
      new GlooBackend(options, std::move(mesh->context), std::move(registry)));
  if (options.local_size == options.size) {  // even when disabled here: the ranks must agree
    DADT_RETURN_IF_ERROR(backend->SetUpSharedMemory(options));
  } else {
    DADT_RETURN_IF_ERROR(backend->MeasureLink(/*keep_segment=*/options.segment_bytes > 0));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

Status GlooBackend::MeasureLink(bool keep_segment) {
  const int64_t block = std::max(kLinkProbeMinBlock, kLinkProbeBytes / (size_ - 1));
  const std::vector<int64_t> blocks(size_, block);
  std::vector<char> buf(static_cast<size_t>(block * size_));
  double seconds = std::numeric_limits<double>::infinity();
  Status measured = DADT_GLOO_STATUS("link probe", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    for (int round = 0; round < kLinkProbeRounds; ++round) {
      internal::RingOptions o = NextRing();
      o.segment_bytes = kLinkProbeSegmentBytes;
      const auto start = std::chrono::steady_clock::now();
      internal::RingAllgather(o, buf.data(), blocks);
      seconds = std::min(
          seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  });
  if (!measured.ok()) return measured;
  // The ring runs at its slowest link's pace: every rank takes the slowest rank's time.
  DADT_RETURN_IF_ERROR(Allreduce(&seconds, 1, DataType::kFloat64, ReduceOp::kMax));
  link_bytes_per_second_ = static_cast<double>(block * (size_ - 1)) / seconds;
  if (!keep_segment) segment_bytes_ = internal::SegmentBytesForLink(link_bytes_per_second_);
  if (rank_ == 0) {
    DADT_LOG(INFO) << "gloo: the ring moved " << static_cast<int64_t>(link_bytes_per_second_ / 1e6)
                   << " MB/s when it connected; segments of " << (segment_bytes_ >> 10) << " KiB"
                   << (keep_segment ? " (DADT_GLOO_SEGMENT_BYTES)" : "");
  }
  return Status::OK();
}

struct GlooBackend::Shared {
  std::unique_ptr<internal::PeerWatchdog> watchdog;  // null when size == 1
  std::unique_ptr<shm::ShmAllreduce> shm;       // null unless every rank is on this host
  std::mutex mu;
  Status broken;         // the first failure of this backend or any fork (guarded by mu)
  uint32_t forks = 0;    // forks made so far (guarded by mu)
};

Status GlooBackend::SetUpSharedMemory(const BackendOptions& options) {
  shm::ShmAllreduceOptions so;
  so.enabled = options.shm_allreduce;
  so.rank = rank_;
  so.size = size_;
  so.exchange = shm::ExchangeThroughStore(
      options.store, options.store_prefix, rank_, size_,
      options.connect_timeout.count() > 0 ? options.connect_timeout : options.timeout);
  StatusOr<std::unique_ptr<shm::ShmAllreduce>> opened = shm::ShmAllreduce::Open(so);
  if (opened.ok()) {
    shared_->shm = std::move(*opened);
  } else if (opened.status().code() != StatusCode::kPreconditionFailed) {
    return opened.status();  // the exchange failed: the store is unreachable
  } else if (options.shm_allreduce) {
    DADT_LOG(WARNING) << "gloo: allreduce over TCP, not shared memory: " << opened.status().message()
                      << " (set DADT_SHM_ALLREDUCE=0 to silence)";
  }
  return Status::OK();
}

GlooBackend::GlooBackend(const BackendOptions& options, std::shared_ptr<::gloo::Context> context,
                         std::shared_ptr<internal::BufferRegistry> registry)
    : rank_(options.rank),
      size_(options.size),
      timeout_(options.timeout),
      // Segments keep a real link's queues short; over loopback they only add wake-ups.
      segment_bytes_(options.segment_bytes > 0            ? options.segment_bytes
                     : options.local_size == options.size ? internal::kWholeBlocks
                                                          : internal::kDefaultSegmentBytes),
      context_(std::move(context)),
      shared_(std::make_shared<Shared>()) {
  if (context_) {
    shared_->watchdog = std::make_unique<internal::PeerWatchdog>(context_, std::move(registry),
                                                                 kPeerProbeInterval);
  }
  watchdog_ = shared_->watchdog.get();
}

GlooBackend::GlooBackend(const GlooBackend& parent, uint32_t tag_base)
    : rank_(parent.rank_),
      size_(parent.size_),
      timeout_(parent.timeout_),
      segment_bytes_(parent.segment_bytes_),
      link_bytes_per_second_(parent.link_bytes_per_second_),
      context_(parent.context_),
      shared_(parent.shared_),
      watchdog_(parent.watchdog_),
      tag_base_(tag_base) {}

GlooBackend::~GlooBackend() = default;

std::unique_ptr<Backend> GlooBackend::Fork() {
  uint32_t k;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    k = ++shared_->forks;
  }
  if (k >= 16) return nullptr;  // the tag's top four bits name the handle: 15 forks at most
  return std::unique_ptr<Backend>(new GlooBackend(*this, k << 28));
}

char* GlooBackend::NonNull(const void* p) {
  static char empty[1];  // Gloo wants a pointer even for zero bytes; never dereferenced
  return p ? static_cast<char*>(const_cast<void*>(p)) : empty;
}

Status GlooBackend::CheckReduce(int64_t count, DataType dtype, ReduceOp op) {
  if (count < 0) return InvalidArgument("negative element count " + std::to_string(count));
  if (!IsValidDataType(static_cast<int32_t>(dtype))) {
    return InvalidArgument("unknown dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
      op != ReduceOp::kProduct) {
    return Unimplemented(std::string("gloo backend does not reduce with op ") + ReduceOpName(op) +
                         " (Average is Sum followed by a scale in the core)");
  }
  return Status::OK();
}

Status GlooBackend::CheckUsable() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->broken.ok()) return Status::OK();
  return Aborted("gloo backend is unusable after an earlier failure: " +
                 shared_->broken.message());
}

Status GlooBackend::Finish(Status status) {
  if (status.ok()) return status;
  Status mine(status.code(), status.message() + " [rank " + std::to_string(rank_) + " of " +
                                 std::to_string(size_) + "]");
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->broken.ok()) shared_->broken = mine;
  }
  if (shared_->shm) shared_->shm->Abort();  // peers waiting in shared memory fail fast too
  // Peers, and this rank's other forks, may be blocked on these connections; resetting them tells
  // everyone at once. Best effort.
  (void)DADT_GLOO_STATUS("close", context_->closeConnections());
  return mine;
}

Status GlooBackend::CheckPerRank(const char* what, const std::vector<int64_t>& v) const {
  if (static_cast<int>(v.size()) != size_) {
    return InvalidArgument(std::string(what) + ": expected " + std::to_string(size_) +
                           " per-rank entries, got " + std::to_string(v.size()));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0) {
      return InvalidArgument(std::string(what) + ": negative size " + std::to_string(v[i]) +
                             " for rank " + std::to_string(i));
    }
  }
  return Status::OK();
}

Status GlooBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  DADT_RETURN_IF_ERROR(CheckReduce(count, dtype, op));
  if (count == 0 || size_ == 1) return Status::OK();
  if (ShmSlot() >= 0) return Finish(shared_->shm->Allreduce(ShmSlot(), buf, count, dtype, op, timeout_));
  return Finish(DADT_GLOO_STATUS("allreduce", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    ::gloo::AllreduceOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    SetAllreduceBuffer(opts, buf, count, DataTypeSize(dtype));
    opts.setReduceFunction(ReduceFunction(dtype, op));
    ::gloo::allreduce(opts);
  }));
}

int GlooBackend::ShmSlot() const {
  const int slot = static_cast<int>(tag_base_ >> 28);
  return shared_->shm && slot < shared_->shm->slots() ? slot : -1;
}

shm::ShmAllreduce* GlooBackend::Shm() const { return ShmSlot() >= 0 ? shared_->shm.get() : nullptr; }

bool GlooBackend::ReducesPieces() const { return size_ > 1; }

Status GlooBackend::AllreducePieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                                    const AllreduceEpilogue& epilogue) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  if (!ReducesPieces()) return Backend::AllreducePieces(pieces, dtype, op, epilogue);
  int64_t count = 0;
  for (const AllreducePiece& p : pieces) count += p.count;
  DADT_RETURN_IF_ERROR(CheckReduce(count, dtype, op));
  if (ShmSlot() >= 0) {
    return Finish(shared_->shm->AllreducePieces(ShmSlot(), pieces, dtype, op, epilogue, timeout_));
  }
  // Refused before any transfer, the same on every rank (the ring applies it mid-way).
  if (epilogue.scale != 1.0) DADT_RETURN_IF_ERROR(ScaleBuffer(nullptr, 0, dtype, epilogue.scale));
  if (epilogue.divisor != 1) DADT_RETURN_IF_ERROR(DivideBuffer(nullptr, 0, dtype, epilogue.divisor));
  if (count == 0) return Status::OK();
  if (!ring_scratch_) ring_scratch_ = std::make_unique<internal::RingScratch>();
  return Finish(DADT_GLOO_STATUS("allreduce", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    internal::RingAllreducePieces(NextRing(), pieces, dtype, op, epilogue, ring_scratch_.get());
  }));
}

Status GlooBackend::Allgatherv(const void* in, void* out,
                               const std::vector<int64_t>& bytes_per_rank) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  DADT_RETURN_IF_ERROR(CheckPerRank("allgatherv", bytes_per_rank));
  const int64_t offset =
      std::accumulate(bytes_per_rank.begin(), bytes_per_rank.begin() + rank_, int64_t{0});
  const int64_t total = std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), int64_t{0});
  const int64_t mine = bytes_per_rank[rank_];
  char* dst = static_cast<char*>(out);
  if (size_ == 1) {
    if (mine > 0 && in != dst) std::memmove(dst, in, mine);
    return Status::OK();
  }
  if (total == 0) return Status::OK();  // every rank sees the same sizes: a consistent skip
  if (Shm() != nullptr) return Finish(Shm()->Allgather(ShmSlot(), in, dst, bytes_per_rank, timeout_));
  if (mine > 0 && in != dst + offset) std::memmove(dst + offset, in, mine);
  return Finish(DADT_GLOO_STATUS("allgatherv", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    internal::RingAllgather(NextRing(), dst, bytes_per_rank);
  }));
}

internal::RingOptions GlooBackend::NextRing() {
  internal::RingOptions o;
  o.context = context_;
  o.tag = NextTag();
  o.timeout = timeout_;
  o.segment_bytes = segment_bytes_;
  return o;
}

Status GlooBackend::Broadcast(void* buf, int64_t bytes, int root) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  if (root < 0 || root >= size_) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of " +
                           std::to_string(size_));
  }
  if (bytes < 0) return InvalidArgument("broadcast: negative size " + std::to_string(bytes));
  if (bytes == 0 || size_ == 1) return Status::OK();
  return Finish(DADT_GLOO_STATUS("broadcast", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    ::gloo::BroadcastOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    opts.setRoot(root);
    opts.setOutput(static_cast<char*>(buf), bytes);  // in place on every rank, root included
    ::gloo::broadcast(opts);
  }));
}

Status GlooBackend::Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                              const std::vector<int64_t>& recv_bytes) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  DADT_RETURN_IF_ERROR(CheckPerRank("alltoallv send sizes", send_bytes));
  DADT_RETURN_IF_ERROR(CheckPerRank("alltoallv receive sizes", recv_bytes));
  if (send_bytes[rank_] != recv_bytes[rank_]) {
    return InvalidArgument("alltoallv: rank " + std::to_string(rank_) + " sends itself " +
                           std::to_string(send_bytes[rank_]) + " bytes but expects " +
                           std::to_string(recv_bytes[rank_]));
  }
  if (size_ == 1) {
    if (send_bytes[0] > 0 && in != out) std::memmove(out, in, send_bytes[0]);
    return Status::OK();
  }
  // No local shortcut when this rank moves nothing: its peers still run the exchange, and the
  // tags must advance in step on every rank.
  return Finish(DADT_GLOO_STATUS("alltoallv", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    ::gloo::AlltoallvOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    opts.setInput(NonNull(in), send_bytes);
    opts.setOutput(NonNull(out), recv_bytes);
    ::gloo::alltoallv(opts);
  }));
}

Status GlooBackend::Barrier() {
  DADT_RETURN_IF_ERROR(CheckUsable());
  if (size_ == 1) return Status::OK();
  return Finish(DADT_GLOO_STATUS("barrier", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    ::gloo::BarrierOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    ::gloo::barrier(opts);
  }));
}

Status GlooBackend::Exchange(const std::vector<PeerBuffer>& sends,
                             const std::vector<PeerBuffer>& recvs, uint32_t sequence) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  for (const auto* list : {&sends, &recvs}) {
    for (const PeerBuffer& b : *list) {
      if (b.peer < 0 || b.peer >= size_ || b.peer == rank_ || b.bytes < 0) {
        return InvalidArgument("exchange: rank " + std::to_string(rank_) + " cannot transfer " +
                               std::to_string(b.bytes) + " bytes with rank " +
                               std::to_string(b.peer) + " in a job of " + std::to_string(size_));
      }
    }
  }
  if (sends.empty() && recvs.empty()) return Status::OK();
  return Finish(DADT_GLOO_STATUS("exchange", {
    internal::PeerWatchdog::Scope watch(watchdog_);
    // Gloo's collectives use slot prefixes 0x01..0x08, dadt's rings 0x41 and 0x42.
    constexpr uint8_t kExchangeSlotPrefix = 0x43;
    const uint64_t slot = ::gloo::Slot::build(kExchangeSlotPrefix, tag_base_ | (sequence & kTagMask));
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> in, out;
    for (const PeerBuffer& b : recvs) {
      in.push_back(context_->createUnboundBuffer(b.data, b.bytes));
      in.back()->recv(b.peer, slot);
    }
    for (const PeerBuffer& b : sends) {
      out.push_back(context_->createUnboundBuffer(b.data, b.bytes));
      out.back()->send(b.peer, slot);
    }
    for (auto& buf : in) {
      if (!buf->waitRecv(timeout_)) throw ::gloo::IoException("exchange receive was aborted");
    }
    for (auto& buf : out) {
      if (!buf->waitSend(timeout_)) throw ::gloo::IoException("exchange send was aborted");
    }
  }));
}

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
