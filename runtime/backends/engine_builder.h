// Engine builder: creates the data-plane Backend a job runs on, from the registry's engine name,
// with or without the hierarchical allreduce over it.
//
// Use it once per rank at start-up, after the rendezvous store is reachable; every rank calls it
// with the same engine name and flags, so the backends (and their sub-group backends) are created
// in the same order everywhere, which engines that meet in the store rely on.
//
//   BackendOptions bo = ...;                    // geometry, store, prefix "gloo/"
//   auto backend = CreateDataPlane("gloo", bo, /*hierarchical=*/false);
//
// Lives beside the interface: it knows no concrete engine, only BackendRegistry and the
// hierarchical algorithm, both written against the interface.
#pragma once

#include <memory>
#include <string>

#include "runtime/backends/backend.h"
#include "runtime/common/status.h"

namespace dadt {
namespace backends {

// The engine `engine` over `options`. With `hierarchical`, and several hosts with the same number
// of ranks each, a HierarchicalAllreduce over it, one backend for this host's ranks and one for
// the ranks with this local rank on every host (created in that order, under the store prefixes
// "<prefix>local/<cross rank>/" and "<prefix>cross/<local rank>/"); otherwise the flat engine
// (rank 0 logs why).
StatusOr<std::unique_ptr<Backend>> CreateDataPlane(const std::string& engine,
                                                   const BackendOptions& options,
                                                   bool hierarchical);

}  // namespace backends
}  // namespace dadt
