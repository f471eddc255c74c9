// Forming the Gloo engine's full mesh of TCP pairs through the rendezvous store.
//
// Gloo's TCP pair takes the first connection that reaches its listening port as its peer's, and
// closes the listener: a connection from anything else (a port scanner, a stranger on the
// network) that arrives first takes the pair's place, and the pair fails on both sides (one sees
// the stranger close, the other is refused). So the mesh is formed in attempts: after each one,
// every rank tells rank 0 through the store whether all its pairs connected, rank 0 publishes the
// verdict, and on any failure every rank tears its pairs down and forms the mesh again on fresh
// ports under a new store prefix, up to kMeshAttempts times. A job whose ranks really cannot reach
// each other still fails, with the first failing rank's reason. A hijacked attempt costs up to
// five times kPairConnectTimeout (Gloo retries the refused connection of the other side).
//
//   auto mesh = ConnectMesh(options, registry);
//   if (!mesh.ok()) return mesh.status();
//   use(mesh->context);  // released through the ticker (loop_ticker.h)
#pragma once

#include <chrono>
#include <memory>

#include <gloo/context.h>

#include "runtime/backends/backend.h"
#include "runtime/backends/gloo/tracked_transport.h"
#include "runtime/common/status.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

inline constexpr int kMeshAttempts = 3;
// The most that connecting the pairs may take once every rank's address is in the store.
inline constexpr std::chrono::milliseconds kPairConnectTimeout{10000};

struct Mesh {
  std::shared_ptr<::gloo::Context> context;  // torn down without waiting on the transport's timer
};

// The connected mesh of `options.size` ranks (size > 1, options.store set), with collectives'
// timeout options.timeout; errors name the rank, the size and the store prefix.
StatusOr<Mesh> ConnectMesh(const BackendOptions& options, std::shared_ptr<BufferRegistry> registry);

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
