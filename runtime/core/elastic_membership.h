// ElasticMembership: how an elastic worker (DADT_ELASTIC=1) learns its place in the job from the
// launcher's rounds, and what the Python elastic layer asks about host updates.
//
// The contract with dadtrun (docs/elastic.md, "launcher <-> worker"):
//   1. dadtrun publishes round r by setting `elastic/round/<r>/assign/<worker id>` for every live
//      worker ("rank size local_rank local_size cross_rank cross_size", or "removed"), then
//      `elastic/round/<r>/size`, then `elastic/round` = r.
//   2. A worker's init() waits (up to DADT_ELASTIC_TIMEOUT) for `elastic/round` greater than the
//      last round this process ran in (0 at first), then reads its assignment there. No
//      assignment: it was spawned for a later round, so it waits for the next one. "removed":
//      init() fails with StatusCode::kRemoved (the Python `run` wrapper exits 0).
//   3. The round runs as one incarnation whose store scope is `elastic/<r>/`, so nothing an earlier
//      round published can be read by this one.
//   4. Host updates: `elastic/notice` = <seq> counts host-set changes; the driver sets it before it
//      publishes the round that follows. The value read at init (read twice around the round, until
//      stable, so that it belongs to the round joined) is the baseline `check_host_updates()`
//      compares with; a round newer than the joined one also counts as an update.
//
// One object per process (the C API holds it), so the last round survives shutdown and init.
// Threading: every method takes mu_; the store client has its own connection, apart from the
// runtime's, so a notice read never waits behind the runtime's rendezvous traffic or its shutdown.
//
//   ElasticMembership m;
//   StatusOr<RuntimeOptions> joined = m.Join(*RuntimeOptions::FromEnv());  // blocks for a round
//   if (joined.ok()) Runtime::Start(*joined, nullptr);   // the runtime connects on its own
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"
#include "runtime/common/types.h"
#include "runtime/core/runtime_options.h"

namespace dadt {
namespace core {

// "elastic/<round>/": the store scope of round `round`'s incarnation.
std::string ElasticScope(int64_t round);

// Parses an assignment value ("rank size local_rank local_size cross_rank cross_size"); anything
// else (and a geometry that is not a place in the job) is InvalidArgument quoting `value`.
StatusOr<JobGeometry> ParseElasticAssignment(const std::string& value);

// Where a worker lands: its round, geometry, and the notice sequence number seen with that round.
struct ElasticJoin {
  int64_t round = 0;
  JobGeometry geometry;
  int64_t notice = 0;
};

// Steps 1-2 and the notice baseline of step 4 over `store` (polling, 20 ms apart): the first round
// after `last_round` that assigns `worker_id`. TimeoutError after `timeout` names the worker id and
// the last round seen; kRemoved when that round removes the worker.
StatusOr<ElasticJoin> JoinElasticRound(KeyValueStore* store, const std::string& worker_id,
                                       int64_t last_round, std::chrono::milliseconds timeout);

// A decimal counter at `key`; 0 when absent.
StatusOr<int64_t> ReadCounter(KeyValueStore* store, const std::string& key);

class ElasticMembership {
 public:
  // Connects (once per process) to the launcher's store, joins the next round, and returns
  // `options` with that round's geometry and store scope. Remembers the round, even on failure
  // to start afterwards: the next Join waits for a later one.
  StatusOr<RuntimeOptions> Join(RuntimeOptions options);

  int64_t round() const;              // the round last joined; 0 before the first
  int64_t notice_at_join() const;     // the baseline of step 4
  StatusOr<int64_t> CurrentNotice();  // `elastic/notice` now; PreconditionFailed before a Join
  StatusOr<int64_t> LatestRound();    // `elastic/round` now; PreconditionFailed before a Join
  // What notice `seq` changed: `elastic/notice/<seq>` ("added", "removed", "mixed"); "" if absent.
  StatusOr<std::string> NoticeKind(int64_t seq);
  // The three reads above fail (kAborted, the message naming the store and the time allowed)
  // when the launcher's store does not answer within the start timeout (DADT_START_TIMEOUT).

 private:
  // A failed read, said as the launcher's store not answering. Called under mu_.
  template <typename T>
  StatusOr<T> Explained(StatusOr<T> read) const;

  mutable std::mutex mu_;
  std::unique_ptr<KeyValueStore> store_;  // guarded by mu_
  std::string endpoint_;                  // guarded by mu_; the store's addr:port
  std::chrono::milliseconds io_timeout_{0};  // guarded by mu_
  int64_t round_ = 0;                     // guarded by mu_
  int64_t notice_ = 0;                    // guarded by mu_
};

}  // namespace core
}  // namespace dadt
