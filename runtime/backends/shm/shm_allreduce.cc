#include "runtime/backends/shm/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "runtime/backends/pieces.h"
#include "runtime/common/reduce.h"

namespace dadt {
namespace backends {
namespace shm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxSlots = 16;
constexpr uint32_t kFailed = 1;  // abort word: this rank's backend failed
constexpr uint32_t kClosed = 2;  // abort word: this rank closed its backend
constexpr size_t kControlBytes = 4096;
constexpr int kSpins = 200;                                  // busy polls before sleeping
constexpr std::chrono::milliseconds kCheckInterval(5);      // futex sleep between checks

// One 32-bit word per cache line: futexes are 32-bit, and words that different ranks write must
// not share a line.
struct alignas(64) Word {
  std::atomic<uint32_t> value{0};
};

// Newer-or-equal for a counter that may wrap (after 2^32 chunks on one handle).
bool Reached(uint32_t value, uint32_t seq) { return static_cast<int32_t>(value - seq) >= 0; }

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds timeout) {
  struct timespec ts;
  ts.tv_sec = timeout.count() / 1000;
  ts.tv_nsec = (timeout.count() % 1000) * 1000000L;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void CpuRelax() { __builtin_ia32_pause(); }

// Where each rank's block begins in the whole: size + 1 offsets, the last the total.
std::vector<int64_t> BlockStarts(const std::vector<int64_t>& per_rank) {
  std::vector<int64_t> starts(per_rank.size() + 1, 0);
  for (size_t r = 0; r < per_rank.size(); ++r) starts[r + 1] = starts[r] + per_rank[r];
  return starts;
}

// A descriptor that becomes readable when `pid` exits (even before its parent reaps it, which
// kill(pid, 0) cannot tell), or -1 where the kernel has no pidfd_open.
int OpenPidFd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool Exited(pid_t pid, int pidfd) {
  if (pidfd >= 0) {
    struct pollfd p = {pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

std::string SegmentName(const std::string& token, int rank) {
  return "/dadt-" + token + "-" + std::to_string(rank);
}

std::string ErrnoText(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

}  // namespace

struct ShmAllreduce::Control {
  Word abort;                 // kFailed or kClosed once this rank can no longer take part
  Word pid;                   // this rank's process id
  Word words[kMaxSlots * 2];  // per slot: arrived, reduced
};

ShmAllreduce::ShmAllreduce(int rank, int size, int slots, int64_t chunk_bytes)
    : rank_(rank), size_(size), slots_(slots), chunk_bytes_(chunk_bytes), maps_(size),
      pids_(size, 0), pidfds_(size, -1), seq_(slots, 0),
      scratch_(size > 2 ? slots : 0, std::vector<uint8_t>(size > 2 ? chunk_bytes : 0)) {
  static_assert(sizeof(Control) <= kControlBytes, "the control block outgrew its page");
}

ShmAllreduce::~ShmAllreduce() {
  // A peer still waiting on this rank (it shut down or failed mid-collective) must not wait for
  // the timeout.
  if (maps_[rank_].base != nullptr) SetAbort(kClosed);
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
  for (Mapping& m : maps_) {
    if (m.base != nullptr) munmap(m.base, m.bytes);
  }
}

ShmExchange ExchangeThroughStore(KeyValueStore* store, std::string prefix, int rank, int size,
                                 std::chrono::milliseconds timeout) {
  return [store, prefix = std::move(prefix), rank, size, timeout](
             const std::string& step, const std::string& mine) -> StatusOr<std::vector<std::string>> {
    if (store == nullptr) return InvalidArgument("shared-memory allreduce needs a store");
    const std::string keys = prefix + "shm/" + step + "/";
    DADT_RETURN_IF_ERROR(store->Set(keys + std::to_string(rank), mine));
    std::vector<std::string> all(size);
    for (int r = 0; r < size; ++r) {
      if (r == rank) {
        all[r] = mine;
        continue;
      }
      DADT_ASSIGN_OR_RETURN(all[r], store->Get(keys + std::to_string(r), timeout));
    }
    return all;
  };
}

StatusOr<std::unique_ptr<ShmAllreduce>> ShmAllreduce::Open(const ShmAllreduceOptions& o) {
  if (!o.exchange) return InvalidArgument("shared-memory allreduce needs an exchange");
  if (o.slots < 1 || o.slots > kMaxSlots) {
    return InvalidArgument("shared-memory allreduce: slots must be 1 to " + std::to_string(kMaxSlots));
  }
  if (o.chunk_bytes < 4096 || o.chunk_bytes % 64 != 0) {
    return InvalidArgument("shared-memory allreduce: chunk_bytes must be a multiple of 64, >= 4096");
  }
  std::string token;
  if (o.rank == 0) {
    std::random_device rd;
    const uint64_t t = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(t));
    token = hex;
  }
  StatusOr<std::vector<std::string>> tokens = o.exchange("token", token);
  if (!tokens.ok()) return tokens.status();
  token = (*tokens)[0];
  std::unique_ptr<ShmAllreduce> shm(new ShmAllreduce(o.rank, o.size, o.slots, o.chunk_bytes));
  const size_t bytes = kControlBytes + static_cast<size_t>(o.slots) * 2 * o.chunk_bytes;
  const std::string mine = SegmentName(token, o.rank);

  // Our own segment: created, allocated now (a full /dev/shm fails here, not with SIGBUS later).
  std::string problem;
  int fd = -1;
  if (!o.enabled) {
    problem = "rank " + std::to_string(o.rank) + " has DADT_SHM_ALLREDUCE=0";
  } else if ((fd = shm_open(mine.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR)) < 0) {
    problem = ErrnoText("shm_open " + mine, errno);
  } else {
    const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      problem = ErrnoText("allocating " + std::to_string(bytes >> 20) + " MiB in /dev/shm", err);
    } else {
      void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) {
        problem = ErrnoText("mmap " + mine, errno);
      } else {
        shm->maps_[o.rank] = {base, bytes};
        Control* c = new (base) Control();
        c->pid.value.store(static_cast<uint32_t>(getpid()), std::memory_order_release);
        shm->pids_[o.rank] = getpid();
      }
    }
  }
  if (fd >= 0) close(fd);
  if (!problem.empty() && o.enabled) problem = "rank " + std::to_string(o.rank) + ": " + problem;
  // "" when this rank's step went well, else what went wrong (naming the rank).
  auto first_problem = [](const std::vector<std::string>& said) {
    for (const std::string& p : said) {
      if (!p.empty()) return p;
    }
    return std::string();
  };
  StatusOr<std::vector<std::string>> created = o.exchange("created", problem);
  if (!created.ok()) problem = created.status().message();
  if (problem.empty()) problem = first_problem(*created);

  // Every peer's segment, now that each says it exists.
  for (int r = 0; r < o.size && problem.empty(); ++r) {
    if (r == o.rank) continue;
    const std::string name = SegmentName(token, r);
    int pfd = shm_open(name.c_str(), O_RDWR, 0);
    if (pfd < 0) {  // another /dev/shm: the rank is on another host, or in another container
      problem = ErrnoText("rank " + std::to_string(o.rank) + ": rank " + std::to_string(r) + "'s segment " + name,
                          errno);
      break;
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    const int mmap_errno = errno;
    close(pfd);
    if (base == MAP_FAILED) {
      problem = ErrnoText("rank " + std::to_string(o.rank) + ": mmap " + name, mmap_errno);
      break;
    }
    shm->maps_[r] = {base, bytes};
    const pid_t pid = static_cast<pid_t>(shm->control(r)->pid.value.load(std::memory_order_acquire));
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
      problem = "rank " + std::to_string(o.rank) + " cannot see rank " + std::to_string(r) + "'s process (pid " +
                std::to_string(pid) + "; another pid namespace?)";
      break;
    }
    shm->pids_[r] = pid;
    shm->pidfds_[r] = OpenPidFd(pid);
  }
  // Nobody unlinks before every rank has opened every segment (or given up).
  StatusOr<std::vector<std::string>> mapped = o.exchange("mapped", problem);
  if (shm->maps_[o.rank].base != nullptr) shm_unlink(mine.c_str());
  if (!mapped.ok()) return mapped.status();
  if (problem.empty()) problem = first_problem(*mapped);
  if (!problem.empty()) return PreconditionFailed(problem);
  return shm;
}

ShmAllreduce::Control* ShmAllreduce::control(int rank) const {
  return static_cast<Control*>(maps_[rank].base);
}

uint8_t* ShmAllreduce::buffer(int rank, int slot, uint64_t seq) const {
  return static_cast<uint8_t*>(maps_[rank].base) + kControlBytes +
         (static_cast<size_t>(slot) * 2 + seq % 2) * chunk_bytes_;
}

void ShmAllreduce::Abort() { SetAbort(kFailed); }

void ShmAllreduce::SetAbort(uint32_t why) {
  Control* c = control(rank_);
  uint32_t none = 0;
  c->abort.value.compare_exchange_strong(none, why, std::memory_order_acq_rel);
  for (int i = 0; i < slots_ * 2; ++i) FutexWake(&c->words[i].value);
}

Status ShmAllreduce::WaitAll(int slot, bool reduced, uint64_t seq, Clock::time_point deadline, const char* what) {
  const uint32_t want = static_cast<uint32_t>(seq);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::atomic<uint32_t>* word = &control(r)->words[slot * 2 + (reduced ? 1 : 0)].value;
    for (int spin = 0;; ++spin) {
      const uint32_t seen = word->load(std::memory_order_acquire);
      if (Reached(seen, want)) break;
      if (spin < kSpins) {
        CpuRelax();
        continue;
      }
      for (int a = 0; a < size_; ++a) {
        const uint32_t why = control(a)->abort.value.load(std::memory_order_acquire);
        if (why != 0 && a != rank_) {
          return Aborted("rank " + std::to_string(a) +
                         (why == kClosed ? " closed its backend" : " failed") +
                         " during a shared-memory " + what);
        }
      }
      if (Exited(pids_[r], pidfds_[r])) {
        return Aborted("rank " + std::to_string(r) + " (pid " + std::to_string(pids_[r]) +
                       ") exited during a shared-memory " + what);
      }
      if (Clock::now() >= deadline) {
        return TimeoutError(std::string("shared-memory ") + what + ": rank " + std::to_string(r) +
                            " did not arrive within the collective timeout");
      }
      FutexWait(word, seen, kCheckInterval);
    }
  }
  return Status::OK();
}

Status ShmAllreduce::Allreduce(int slot, void* buf, int64_t count, DataType dtype, ReduceOp op,
                               std::chrono::milliseconds timeout) {
  return AllreducePieces(slot, {AllreducePiece{buf, buf, count}}, dtype, op, AllreduceEpilogue{}, timeout);
}

Status ShmAllreduce::AllreducePieces(int slot, const std::vector<AllreducePiece>& pieces, DataType dtype,
                                     ReduceOp op, const AllreduceEpilogue& epilogue,
                                     std::chrono::milliseconds timeout) {
  if (slot < 0 || slot >= slots_) return InvalidArgument("shared-memory allreduce: bad slot");
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t chunk_elems = chunk_bytes_ / esize;
  const Clock::time_point deadline = Clock::now() + timeout;
  // Refused here, the same on every rank, never half-way through a chunk that peers wait on.
  if (epilogue.scale != 1.0) DADT_RETURN_IF_ERROR(ScaleBuffer(nullptr, 0, dtype, epilogue.scale));
  if (epilogue.divisor != 1) DADT_RETURN_IF_ERROR(DivideBuffer(nullptr, 0, dtype, epilogue.divisor));
  const std::vector<int64_t> starts = PieceStarts(pieces);
  const int64_t count = starts.back();
  for (int64_t off = 0; off < count; off += chunk_elems) {
    const int64_t n = std::min(chunk_elems, count - off);
    const uint64_t seq = ++seq_[slot];
    uint8_t* const mine = buffer(rank_, slot, seq);
    ForEachShare(pieces, starts, off, off + n, [&](const AllreducePiece& p, int64_t from, int64_t to, int64_t k) {
      if (p.in != nullptr) {
        std::memcpy(mine + to * esize, static_cast<const uint8_t*>(p.in) + from * esize, k * esize);
      } else {
        std::memset(mine + to * esize, 0, k * esize);
      }
    });
    DADT_RETURN_IF_ERROR(Arrive(slot, seq, deadline, "allreduce"));

    // My slice, reduced over every rank in rank order into my buffer, then the epilogue.
    const int64_t lo = n * rank_ / size_;
    const int64_t hi = n * (rank_ + 1) / size_;
    if (hi > lo) {
      // Ranks 0 and 1 reduce straight into their own slice (the first step reads it at the same
      // element it writes); a later rank's own input is still needed after that step, so it
      // reduces into its slot's scratch and copies the result in.
      uint8_t* const slice = mine + lo * esize;
      uint8_t* const out = rank_ < 2 ? slice : scratch_[slot].data();
      const size_t at = static_cast<size_t>(lo * esize);
      ReduceBinary(out, buffer(0, slot, seq) + at, buffer(1, slot, seq) + at, hi - lo, dtype, op);
      for (int r = 2; r < size_; ++r) ReduceBinary(out, out, buffer(r, slot, seq) + at, hi - lo, dtype, op);
      if (out != slice) std::memcpy(slice, out, static_cast<size_t>((hi - lo) * esize));
      if (epilogue.scale != 1.0) DADT_RETURN_IF_ERROR(ScaleBuffer(slice, hi - lo, dtype, epilogue.scale));
      if (epilogue.divisor != 1) DADT_RETURN_IF_ERROR(DivideBuffer(slice, hi - lo, dtype, epilogue.divisor));
    }
    Publish(slot, /*reduced=*/true, seq);
    DADT_RETURN_IF_ERROR(WaitAll(slot, /*reduced=*/true, seq, deadline, "allreduce"));

    for (int r = 0; r < size_; ++r) {
      const int64_t rlo = n * r / size_;
      const int64_t rhi = n * (r + 1) / size_;
      const uint8_t* const reduced = buffer(r, slot, seq);
      ForEachShare(pieces, starts, off + rlo, off + rhi, [&](const AllreducePiece& p, int64_t from, int64_t to, int64_t k) {
        if (p.out != nullptr) {
          std::memcpy(static_cast<uint8_t*>(p.out) + from * esize, reduced + (rlo + to) * esize, k * esize);
        }
      });
    }
  }
  return Status::OK();
}

Status ShmAllreduce::CheckBlocks(int slot, const std::vector<int64_t>& per_rank, const char* what) const {
  if (slot < 0 || slot >= slots_) return InvalidArgument(std::string("shared-memory ") + what + ": bad slot");
  if (static_cast<int>(per_rank.size()) != size_) {
    return InvalidArgument(std::string("shared-memory ") + what + ": one block size per rank expected, got " +
                           std::to_string(per_rank.size()) + " for " + std::to_string(size_) + " ranks");
  }
  return Status::OK();
}

void ShmAllreduce::Publish(int slot, bool reduced, uint64_t seq) {
  std::atomic<uint32_t>* word = &control(rank_)->words[slot * 2 + (reduced ? 1 : 0)].value;
  word->store(static_cast<uint32_t>(seq), std::memory_order_release);
  FutexWake(word);
}

Status ShmAllreduce::Arrive(int slot, uint64_t seq, Clock::time_point deadline, const char* what) {
  Publish(slot, /*reduced=*/false, seq);
  return WaitAll(slot, /*reduced=*/false, seq, deadline, what);
}

Status ShmAllreduce::Reducescatter(int slot, const void* in, void* out, const std::vector<int64_t>& recv_counts,
                                   DataType dtype, ReduceOp op, std::chrono::milliseconds timeout) {
  DADT_RETURN_IF_ERROR(CheckBlocks(slot, recv_counts, "reduce-scatter"));
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  // A chunk holds `share` elements of every rank's block, block r's at r * share.
  const int64_t share = std::max<int64_t>(1, chunk_bytes_ / esize / size_);
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::vector<int64_t> starts = BlockStarts(recv_counts);
  const int64_t longest = *std::max_element(recv_counts.begin(), recv_counts.end());
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  // `out` may be my block of `in`: chunk k writes elements [k * share, (k + 1) * share) of it,
  // which chunk k has already copied in and no later chunk reads.
  for (int64_t done = 0; done < longest; done += share) {
    const uint64_t seq = ++seq_[slot];
    uint8_t* const mine = buffer(rank_, slot, seq);
    for (int r = 0; r < size_; ++r) {
      const int64_t k = std::clamp<int64_t>(recv_counts[r] - done, 0, share);
      if (k > 0) std::memcpy(mine + r * share * esize, src + (starts[r] + done) * esize, k * esize);
    }
    DADT_RETURN_IF_ERROR(Arrive(slot, seq, deadline, "reduce-scatter"));
    const int64_t k = std::clamp<int64_t>(recv_counts[rank_] - done, 0, share);
    if (k > 0) {
      // In rank order, as the allreduce: every run gives the same bits.
      const size_t at = static_cast<size_t>(rank_ * share * esize);
      uint8_t* const result = dst + done * esize;
      ReduceBinary(result, buffer(0, slot, seq) + at, buffer(1, slot, seq) + at, k, dtype, op);
      for (int r = 2; r < size_; ++r) ReduceBinary(result, result, buffer(r, slot, seq) + at, k, dtype, op);
    }
  }
  return Status::OK();
}

Status ShmAllreduce::Allgather(int slot, const void* in, void* out, const std::vector<int64_t>& bytes_per_rank,
                               std::chrono::milliseconds timeout) {
  DADT_RETURN_IF_ERROR(CheckBlocks(slot, bytes_per_rank, "all-gather"));
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::vector<int64_t> starts = BlockStarts(bytes_per_rank);
  const int64_t longest = *std::max_element(bytes_per_rank.begin(), bytes_per_rank.end());
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t done = 0; done < longest; done += chunk_bytes_) {
    const uint64_t seq = ++seq_[slot];
    const int64_t k = std::clamp<int64_t>(bytes_per_rank[rank_] - done, 0, chunk_bytes_);
    if (k > 0) std::memcpy(buffer(rank_, slot, seq), src + done, k);
    DADT_RETURN_IF_ERROR(Arrive(slot, seq, deadline, "all-gather"));
    for (int r = 0; r < size_; ++r) {
      const int64_t kr = std::clamp<int64_t>(bytes_per_rank[r] - done, 0, chunk_bytes_);
      // My own bytes are already in place when `in` is my part of `out`.
      if (kr > 0 && !(r == rank_ && src == dst + starts[r])) {
        std::memcpy(dst + starts[r] + done, buffer(r, slot, seq), kr);
      }
    }
  }
  return Status::OK();
}

}  // namespace shm
}  // namespace backends
}  // namespace dadt
