#include "runtime/core/elastic_membership.h"

#include <cstdlib>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/common/rendezvous/client.h"

namespace dadt {
namespace core {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kRoundKey[] = "elastic/round";
constexpr char kNoticeKey[] = "elastic/notice";
constexpr char kRemoved[] = "removed";
// How often a waiting worker asks again: rounds come seconds apart, the store is local to the job.
constexpr std::chrono::milliseconds kPoll{20};

std::string AssignKey(int64_t round, const std::string& worker_id) {
  return "elastic/round/" + std::to_string(round) + "/assign/" + worker_id;
}

// Set by the driver once a worker of that round has exited 0: the job is ending, and no later
// round will be formed.
std::string FinishedKey(int64_t round) { return "elastic/round/" + std::to_string(round) + "/finished"; }

// `key`'s value if it exists now; "" with *found = false if not.
StatusOr<std::string> TryGet(KeyValueStore* store, const std::string& key, bool* found) {
  StatusOr<std::string> v = store->Get(key, std::chrono::milliseconds(0));
  *found = v.ok();
  if (v.ok() || v.status().code() == StatusCode::kTimeout) return v.ok() ? *v : std::string();
  return v.status();
}

}  // namespace

std::string ElasticScope(int64_t round) { return "elastic/" + std::to_string(round) + "/"; }

StatusOr<JobGeometry> ParseElasticAssignment(const std::string& value) {
  std::istringstream in(value);
  int64_t f[6];
  for (int64_t& x : f) {
    if (!(in >> x)) {
      return InvalidArgument("elastic assignment '" + value + "' is not six integers (rank size "
                             "local_rank local_size cross_rank cross_size)");
    }
  }
  std::string rest;
  if (in >> rest) return InvalidArgument("elastic assignment '" + value + "' has trailing text");
  JobGeometry g;
  g.rank = static_cast<int>(f[0]);
  g.size = static_cast<int>(f[1]);
  g.local_rank = static_cast<int>(f[2]);
  g.local_size = static_cast<int>(f[3]);
  g.cross_rank = static_cast<int>(f[4]);
  g.cross_size = static_cast<int>(f[5]);
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size || g.local_size < 1 || g.local_rank < 0 ||
      g.local_rank >= g.local_size || g.cross_size < 1 || g.cross_rank < 0 ||
      g.cross_rank >= g.cross_size) {
    return InvalidArgument("elastic assignment '" + value + "' is no valid place in a job");
  }
  return g;
}

StatusOr<int64_t> ReadCounter(KeyValueStore* store, const std::string& key) {
  bool found = false;
  std::string v;
  DADT_ASSIGN_OR_RETURN(v, TryGet(store, key, &found));
  if (!found) return int64_t{0};
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0) {
    return InvalidArgument("rendezvous key '" + key + "' holds '" + v + "', not a round number");
  }
  return static_cast<int64_t>(n);
}

StatusOr<ElasticJoin> JoinElasticRound(KeyValueStore* store, const std::string& worker_id,
                                       int64_t last_round, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int64_t seen = last_round;  // rounds up to here are not for this worker
  for (;;) {
    // The notice before and after the round, until they agree: the driver sets the notice before
    // the round it causes, so a stable pair means the notice is the joined round's (or older).
    int64_t notice_before, round, notice_after;
    DADT_ASSIGN_OR_RETURN(notice_before, ReadCounter(store, kNoticeKey));
    DADT_ASSIGN_OR_RETURN(round, ReadCounter(store, kRoundKey));
    DADT_ASSIGN_OR_RETURN(notice_after, ReadCounter(store, kNoticeKey));
    if (round > seen && notice_before == notice_after) {
      bool found = false;
      std::string value;
      DADT_ASSIGN_OR_RETURN(value, TryGet(store, AssignKey(round, worker_id), &found));
      if (found && value == kRemoved) {
        return RemovedError("this worker (" + worker_id + ") was removed from the job in elastic "
                            "round " + std::to_string(round));
      }
      if (found) {
        StatusOr<JobGeometry> g = ParseElasticAssignment(value);
        if (!g.ok()) return g.status();
        return ElasticJoin{round, *g, notice_after};
      }
      seen = round;  // spawned for a later round
    }
    if (last_round > 0 && round == last_round) {
      bool finished = false;
      std::string who;
      DADT_ASSIGN_OR_RETURN(who, TryGet(store, FinishedKey(last_round), &finished));
      if (finished) {
        return PreconditionFailed("no new elastic round will come for worker " + worker_id + ": " + who +
                                  " of round " + std::to_string(last_round) +
                                  " finished training, so the job is ending");
      }
    }
    if (Clock::now() >= deadline) {
      return TimeoutError("elastic worker " + worker_id + " found no round that includes it " +
                          "within " + std::to_string(timeout.count() / 1000) +
                          " s (DADT_ELASTIC_TIMEOUT; last round seen: " + std::to_string(seen) + ")");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

StatusOr<RuntimeOptions> ElasticMembership::Join(RuntimeOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_) {
    auto client = rendezvous::ConnectFromEnv(options.start_timeout);
    if (!client.ok()) return client.status();
    // A launcher that stops answering is reported within the start timeout, not 60 s.
    (*client)->set_io_timeout(options.start_timeout);
    endpoint_ = (*client)->endpoint();
    io_timeout_ = options.start_timeout;
    store_ = std::move(*client);
  }
  StatusOr<ElasticJoin> join =
      JoinElasticRound(store_.get(), options.elastic_worker_id, round_, options.elastic_timeout);
  if (!join.ok()) return join.status();
  round_ = join->round;
  notice_ = join->notice;
  static_cast<JobGeometry&>(options) = join->geometry;
  options.engine_environment.size = join->geometry.size;
  options.store_scope = ElasticScope(join->round);
  return options;
}

int64_t ElasticMembership::round() const {
  std::lock_guard<std::mutex> lock(mu_);
  return round_;
}

int64_t ElasticMembership::notice_at_join() const {
  std::lock_guard<std::mutex> lock(mu_);
  return notice_;
}

template <typename T>
StatusOr<T> ElasticMembership::Explained(StatusOr<T> read) const {
  if (read.ok() || read.status().code() != StatusCode::kAborted) return read;
  const int64_t ms = io_timeout_.count();
  const std::string allowed = ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
  return Aborted("the launcher's store (dadtrun's rendezvous server at " + endpoint_ + ") did not answer within " +
                 allowed + " (DADT_START_TIMEOUT) or closed the connection: is dadtrun alive? (" +
                 read.status().message() + ")");
}

StatusOr<int64_t> ElasticMembership::CurrentNotice() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_) return PreconditionFailed("not an elastic worker, or not yet initialized");
  return Explained(ReadCounter(store_.get(), kNoticeKey));
}

StatusOr<int64_t> ElasticMembership::LatestRound() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_) return PreconditionFailed("not an elastic worker, or not yet initialized");
  return Explained(ReadCounter(store_.get(), kRoundKey));
}

StatusOr<std::string> ElasticMembership::NoticeKind(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_) return PreconditionFailed("not an elastic worker, or not yet initialized");
  bool found = false;
  return Explained(TryGet(store_.get(), std::string(kNoticeKey) + "/" + std::to_string(seq), &found));
}

}  // namespace core
}  // namespace dadt
