#include "runtime/backends/gloo/mesh.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "runtime/backends/gloo/gloo_error.h"
#include "runtime/backends/gloo/loop_ticker.h"
#include "runtime/backends/gloo/store_adapter.h"
#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/logging.h"
#include "runtime/common/thread_priority.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
namespace {

::gloo::transport::tcp::attr DeviceAttr(const BackendOptions& options) {
  ::gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else if (options.local_size == options.size) {
    attr.hostname = "127.0.0.1";  // every rank on this host: loopback, no name resolution
  } else {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    attr.hostname = name;
  }
  return attr;
}

// The device starts Gloo's transport thread, which inherits the scheduling of the thread that
// creates it: with realtime_threads, a short-lived real-time thread creates it.
std::shared_ptr<::gloo::transport::Device> CreateDevice(
    const BackendOptions& options, std::shared_ptr<internal::BufferRegistry> registry) {
  if (!options.realtime_threads) return internal::CreateTrackedDevice(DeviceAttr(options), registry);
  std::shared_ptr<::gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread([&] {
    (void)MakeThisThreadRealtime();  // the runtime's loop thread logs when this is not allowed
    try {
      device = internal::CreateTrackedDevice(DeviceAttr(options), registry);
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return device;
}

// The context, released through the ticker (loop_ticker.h): whoever drops the last reference (the
// backend, a fork, the watchdog) tears the pairs and the device down without waiting on the
// transport loop's timer.
std::shared_ptr<::gloo::Context> WithQuickTeardown(std::shared_ptr<::gloo::Context> context,
                                                   std::unique_ptr<internal::LoopTicker> ticker) {
  if (!ticker) return context;
  std::shared_ptr<internal::LoopTicker> shared_ticker(std::move(ticker));
  ::gloo::Context* raw = context.get();
  return std::shared_ptr<::gloo::Context>(
      raw, [context, shared_ticker](::gloo::Context*) mutable {
        shared_ticker->Start();
        context.reset();        // the pairs, then (last reference) the device and its loop
        shared_ticker.reset();  // the device is gone: just closes the eventfd
      });
}

// The slots of the pairs' proofs (Gloo slots are the tags of unbound-buffer messages); used before
// any collective, so they meet nothing else.
constexpr uint64_t kNonceSlot = 0x6461647461757468ull;  // "dadtauth"
constexpr uint64_t kProofSlot = kNonceSlot + 1;

std::string PairLabel(int from, int to) {
  return "dadt gloo pair " + std::to_string(from) + " to " + std::to_string(to);
}

// Each rank sends every peer a fresh nonce, then Proof(secret, "<self> to <peer>", the peer's
// nonce, its own) over the pair, and checks each peer's proof against its own nonce: a pair whose
// other end is not a rank of this job (a stranger who took its listener) cannot answer. Returns
// the first peer whose proof failed, or -1. Gloo's errors (a peer gone, the timeout) throw.
int ProvePeers(::gloo::Context& context, const std::string& secret, std::chrono::milliseconds timeout) {
  const int rank = context.rank, size = context.size;
  StatusOr<std::string> nonce = auth::NewNonce();
  if (!nonce.ok()) throw ::gloo::Exception(nonce.status().message());
  const std::string mine = std::move(*nonce);
  // Sends outgoing[p] to every peer p and receives its message into incoming[p], on `slot`.
  auto exchange = [&](std::vector<std::string>& outgoing, std::vector<std::string>& incoming, uint64_t slot) {
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> recvs(size), sends(size);
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      recvs[p] = context.createUnboundBuffer(incoming[p].data(), incoming[p].size());
      recvs[p]->recv(p, slot);
    }
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      sends[p] = context.createUnboundBuffer(outgoing[p].data(), outgoing[p].size());
      sends[p]->send(p, slot);
    }
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      recvs[p]->waitRecv(timeout);
      sends[p]->waitSend(timeout);
    }
  };
  std::vector<std::string> mine_to_all(size, mine), theirs(size, std::string(auth::kNonceBytes, '\0'));
  exchange(mine_to_all, theirs, kNonceSlot);
  std::vector<std::string> mine_for(size), proofs(size, std::string(auth::kProofBytes, '\0'));
  for (int p = 0; p < size; ++p) {
    if (p != rank) mine_for[p] = auth::Proof(secret, PairLabel(rank, p), theirs[p], mine);
  }
  exchange(mine_for, proofs, kProofSlot);
  for (int p = 0; p < size; ++p) {
    if (p != rank && !auth::ProofMatches(proofs[p], auth::Proof(secret, PairLabel(p, rank), mine, theirs[p]))) {
      return p;
    }
  }
  return -1;
}

// Every rank's outcome of one attempt, through the store: each rank sets its own ("ok" or why it
// failed), rank 0 reads them all and publishes the verdict ("ok", or the failures), which every
// rank reads. An error here (the store or a rank gone) ends the attempts.
StatusOr<std::string> MeshVerdict(const BackendOptions& options, const std::string& prefix,
                                  const Status& mine, std::chrono::milliseconds timeout) {
  KeyValueStore* store = options.store;
  const std::string keys = prefix + "mesh_verdict/";
  DADT_RETURN_IF_ERROR(store->Set(keys + std::to_string(options.rank),
                                  mine.ok() ? "ok" : mine.message().substr(0, 300)));
  if (options.rank == 0) {
    std::string failures;
    for (int r = 0; r < options.size; ++r) {
      std::string v;
      DADT_ASSIGN_OR_RETURN(v, store->Get(keys + std::to_string(r), timeout));
      if (v != "ok") failures += (failures.empty() ? "rank " : "; rank ") + std::to_string(r) + ": " + v;
    }
    DADT_RETURN_IF_ERROR(store->Set(keys + "all", failures.empty() ? "ok" : failures));
  }
  return store->Get(keys + "all", timeout);
}

// The verdict of a rank that stopped waiting for a peer that never published its address.
constexpr char kGaveUp[] = "gave up waiting for a rank that had not arrived within the start timeout";

}  // namespace

StatusOr<Mesh> ConnectMesh(const BackendOptions& options, std::shared_ptr<BufferRegistry> registry) {
  // Meeting in the store is bounded by the start timeout; connecting the pairs once every
  // address is known by kPairConnectTimeout at most (a pair whose listener a stranger took retries
  // a refused connection until then); collectives by the operation timeout.
  const auto connect_timeout =
      options.connect_timeout.count() > 0 ? options.connect_timeout : options.timeout;
  const auto pair_timeout = std::min<std::chrono::milliseconds>(connect_timeout, kPairConnectTimeout);
  const std::string where = " [rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.size) + ", store prefix '" +
                            options.store_prefix + "']";
  for (int attempt = 1;; ++attempt) {
    const std::string prefix =
        options.store_prefix + (attempt == 1 ? "" : "mesh" + std::to_string(attempt) + "/");
    // The others already gave up on this attempt (this rank is late): nothing is left to connect
    // to, so end now rather than after Gloo's retries of the refused connections (one store read).
    StatusOr<std::string> early = options.store->Get(prefix + "mesh_verdict/all", std::chrono::milliseconds(0));
    if (early.ok() && early->find(kGaveUp) != std::string::npos) {
      return Status(StatusCode::kTimeout, "the Gloo mesh did not form: " + *early + where +
                                              " (dadtrun --start-timeout, DADT_START_TIMEOUT)");
    }
    std::shared_ptr<::gloo::rendezvous::Context> context;
    std::unique_ptr<LoopTicker> ticker;
    int unproven = -1;
    double proof_ms = 0;
    StoreAdapter store(options.store, prefix, connect_timeout);
    Status s = DADT_GLOO_STATUS("connect", {
      auto device = CreateDevice(options, registry);
      if (!options.realtime_threads) ticker = LoopTicker::Attach(device);
      context = std::make_shared<::gloo::rendezvous::Context>(options.rank, options.size);
      context->setTimeout(pair_timeout);
      // Connecting waits on the transport loop too (loop_ticker.h): keep it turning meanwhile.
      if (ticker) ticker->Start();
      context->connectFullMesh(store, device);
      if (ticker) ticker->Stop();
      const auto proving = std::chrono::steady_clock::now();
      unproven = ProvePeers(*context, options.secret, pair_timeout);
      proof_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - proving)
                     .count();
      context->setTimeout(options.timeout);
    });
    if (s.ok() && unproven >= 0) {
      s = Aborted("the other end of the pair with rank " + std::to_string(unproven) +
                  " did not prove that it knows the job secret (a process that is not a rank of "
                  "this job took that rank's place)");
    }
    if (s.ok()) {
      DADT_LOG(DEBUG) << "gloo: " << options.size - 1 << " pair(s) of rank " << options.rank
                      << " proved the job secret in " << proof_ms << " ms" << where;
    }
    // A rank that failed closes its pairs and listeners before it waits for the verdict, so that
    // its peers' connections are refused at once rather than left waiting for a handshake.
    if (!s.ok()) WithQuickTeardown(std::move(context), std::move(ticker));  // released at once
    // A peer that never published its address within the whole meeting time (the start timeout)
    // never reached the meeting: it will not report a verdict either, and another attempt would
    // wait for it again. Every rank that did arrive times out on its key the same way.
    if (!s.ok() && store.key_never_appeared()) {
      // A rank that reaches the meeting after this one gave up finds its verdict at once, instead
      // of waiting the verdict's whole time for ranks that are gone (an elastic worker that a new
      // round started late, a slow host).
      (void)options.store->Set(prefix + "mesh_verdict/" + std::to_string(options.rank), kGaveUp);
      if (options.rank == 0) (void)options.store->Set(prefix + "mesh_verdict/all", std::string("rank 0: ") + kGaveUp);
      return Status(s.code(), s.message() + where +
                                  ": a rank did not reach init() within the start timeout "
                                  "(dadtrun --start-timeout, DADT_START_TIMEOUT)");
    }
    // Gloo retries a refused connection (five times, each up to the pair timeout) before a
    // peer of a failed rank gives up: the verdict waits that long.
    StatusOr<std::string> verdict =
        MeshVerdict(options, prefix, s, connect_timeout + 6 * pair_timeout);
    if (verdict.ok() && *verdict == "ok" && s.ok()) {
      return Mesh{WithQuickTeardown(std::move(context), std::move(ticker))};
    }
    if (s.ok()) WithQuickTeardown(std::move(context), std::move(ticker));  // released at once
    if (!verdict.ok()) {
      const Status& first = s.ok() ? verdict.status() : s;
      return Status(first.code(), first.message() + where);
    }
    if (verdict->find(kGaveUp) != std::string::npos) {  // no attempt forms a mesh with ranks that left
      return Status(StatusCode::kTimeout, "the Gloo mesh did not form: " + *verdict + where +
                                              " (dadtrun --start-timeout, DADT_START_TIMEOUT)");
    }
    if (attempt == kMeshAttempts) {
      return Status(s.ok() ? StatusCode::kAborted : s.code(),
                    "the Gloo mesh did not form in " + std::to_string(kMeshAttempts) +
                        " attempts (a process that is not a rank of this job may be connecting to "
                        "the ranks' ports); last attempt: " + *verdict + where);
    }
    DADT_LOG(WARNING) << "gloo: the mesh did not form (" << *verdict << "); forming it again on "
                      << "new ports, attempt " << attempt + 1 << " of " << kMeshAttempts
                      << " (a process that is not a rank of this job may have connected to a "
                      << "rank's port)";
  }
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
