// ScopedStore: a view of a KeyValueStore in which every key carries a fixed prefix.
//
// Each init() of a process starts a new incarnation of the runtime (init, shutdown, init, ... in
// one process, as Horovod's own tests do a hundred times per launch). The rendezvous server lives
// as long as the job, so the keys an incarnation publishes (the coordinator's address, Gloo's
// listening addresses, NCCL's unique id) would still be there for the next one to read: a rank
// that asked for "ctrl/addr" before rank 0 had re-published it would dial a port that is closed.
// Every engine of an incarnation therefore sees the job's store through IncarnationScope(n), and
// nothing one incarnation wrote can be read by another. Keys about the whole job ("ready/<rank>",
// "cause/<rank>", which dadtrun reads) stay on the unscoped store.
//
// How ranks agree on n without talking: n counts the calls of init() in this process (failed
// ones included), so the k-th init() of every rank meets the k-th init() of the others however
// far apart in time they arrive. Horovod's contract that init() and shutdown() are called by
// every rank alike is what makes the counts equal.
//
//   ScopedStore scoped(job_store.get(), IncarnationScope(3));   // keys "run/3/..."
//   (void)scoped.Set("ctrl/addr", "10.0.0.1:4000");             // stores "run/3/ctrl/addr"
//
// Thread safety: that of the wrapped store. Lifetime: the wrapped store must outlive this view.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"

namespace dadt {
namespace rendezvous {

// "run/<incarnation>/": the prefix of incarnation `incarnation` (0 for the first init()).
std::string IncarnationScope(int64_t incarnation);

class ScopedStore : public KeyValueStore {
 public:
  ScopedStore(KeyValueStore* base, std::string prefix)
      : base_(base), prefix_(std::move(prefix)) {}

  Status Set(const std::string& key, const std::string& value) override;
  // A timeout names the full key, prefix included (what the server was asked for).
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;

  const std::string& prefix() const { return prefix_; }

 private:
  KeyValueStore* base_;
  const std::string prefix_;
};

}  // namespace rendezvous
}  // namespace dadt
