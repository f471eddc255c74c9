// Engine setup: settles which engines a rank runs and connects them, before its Runtime starts.
//
// Three steps and their order live here, apart from the loop that uses the result:
//  1. The engines: backends::ChooseEngines (runtime/backends/engine_choice.h) decides them from
//     the request, the environment, the build and the GPUs; here it is called with the facts of
//     this process, before connecting and again once the geometry is known (an MPI control plane
//     learns the ranks per host only when it connects).
//  2. The rendezvous store: the one given, dadtrun's (DADT_RENDEZVOUS_ADDR), or an in-memory one
//     for a single process (or under plain mpirun with the mpi executor). The engines see it
//     through the incarnation's scope (options.incarnation, rendezvous/scoped_store.h), so that
//     nothing an earlier init() of this process published is read by this one.
//  3. Connections, in the same order on every rank: an MPI control plane first (it learns the
//     geometry from MPI), then the data-plane backend (runtime/backends/engine_builder.h), then
//     the TCP star (TcpControlTransport).
// Runs on the thread that calls Runtime::Start. Core code: it names the engines with external
// libraries (Gloo, MPI, NCCL) only by their registry names and never includes one; the TCP star
// is dadt's own (runtime/backends/tcp) and is created directly.
//
//   auto engines = ConnectEngines(options, /*store=*/nullptr);
//   if (!engines.ok()) return engines.status();
//   engines->backend->Allreduce(...);
#pragma once

#include <memory>

#include "runtime/backends/backend.h"
#include "runtime/backends/control_transport.h"
#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"
#include "runtime/core/runtime_options.h"

namespace dadt {
namespace core {

struct Engines {
  // As settled: the engines chosen (options.engines), and the geometry an MPI control plane found.
  RuntimeOptions options;
  std::unique_ptr<KeyValueStore> store;  // the job's: keys about the whole job ("cause/<rank>")
  // `store` seen under IncarnationScope(options.incarnation): what the engines connect through.
  std::unique_ptr<KeyValueStore> scoped_store;
  std::unique_ptr<backends::Backend> backend;               // the data plane
  std::unique_ptr<backends::ControlTransport> transport;    // negotiation
  // What the data plane was created with; the GPU engine is created over the same (lazily).
  backends::BackendOptions backend_options;
};

// ChooseEngines over `options`' request and environment, this build's engines and the GPUs this
// process sees, with `local_ranks` ranks on this host (0: not known yet; the GPUs are then counted
// only for the nccl executor). Reads, starts nothing.
StatusOr<backends::EngineChoice> ChooseJobEngines(const RuntimeOptions& options, int local_ranks);

// The IPv4 address this rank is reached at (the TCP star's coordinator listens on it, every
// rank's liveness watch too): the chosen interface's, loopback when every rank is on this host,
// else the address the hostname resolves to.
StatusOr<std::string> BindAddress(const RuntimeOptions& o);

// Settles `requested` and connects every engine; `store` may be null (see 2 above). Also sets
// the log prefix's rank once the rank is known.
StatusOr<Engines> ConnectEngines(const RuntimeOptions& requested,
                                 std::unique_ptr<KeyValueStore> store);

}  // namespace core
}  // namespace dadt
