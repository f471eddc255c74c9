// The worker's half of negotiation without a network: what a rank sends each cycle (full requests,
// cached refs, shutdown), the cache toggle, resends; and a worker talking to a real Coordinator
// through serialized messages, with a reassigned slot forcing a resend.
#include "runtime/core/negotiation/worker_negotiator.h"

#include <gtest/gtest.h>

#include "runtime/core/negotiation/coordinator.h"
#include "runtime/core/response_dispatcher.h"

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;

Request Allreduce(int rank, const std::string& name, Shape shape = {4}) {
  Request r;
  r.rank = rank;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = shape;
  return r;
}

EntryMap Pending(std::initializer_list<Request> requests) {
  EntryMap m;
  for (const Request& r : requests) m[r.name].request = r;
  return m;
}

TEST(WorkerNegotiatorTest, NothingSubmittedIsNoBatch) {
  ResponseCache cache(8);
  WorkerNegotiator n(1, &cache);
  EXPECT_FALSE(n.TakeBatch().has_value());
}

TEST(WorkerNegotiatorTest, FirstSubmissionTravelsInFullOncePerBatch) {
  ResponseCache cache(8);
  WorkerNegotiator n(3, &cache);
  n.Submit(Allreduce(3, "a"));
  n.Submit(Allreduce(3, "b"));
  auto batch = n.TakeBatch();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->rank, 3);
  ASSERT_EQ(batch->requests.size(), 2u);
  EXPECT_EQ(batch->requests[0].name, "a");
  EXPECT_EQ(batch->requests[1].name, "b");
  EXPECT_TRUE(batch->cached.empty());
  EXPECT_FALSE(batch->shutdown);
  EXPECT_FALSE(n.TakeBatch().has_value()) << "a batch is sent once";
}

TEST(WorkerNegotiatorTest, CachedSignatureTravelsAsARefWithItsEagerData) {
  ResponseCache cache(8);
  const CachedRef ref{5, 9};
  cache.Put(ref, Allreduce(1, "w"));
  WorkerNegotiator n(1, &cache);
  Request again = Allreduce(1, "w");
  again.eager = true;
  again.data = "0123456789abcdef";
  n.Submit(again);
  auto batch = n.TakeBatch();
  ASSERT_TRUE(batch.has_value());
  EXPECT_TRUE(batch->requests.empty());
  ASSERT_EQ(batch->cached.size(), 1u);
  EXPECT_EQ(batch->cached[0].slot, 5);
  EXPECT_EQ(batch->cached[0].generation, 9u);
  EXPECT_TRUE(batch->cached[0].eager);
  EXPECT_EQ(batch->cached[0].data, again.data);
  EXPECT_EQ(n.refs_in_flight(), 1u);
}

TEST(WorkerNegotiatorTest, ChangedSignatureTravelsInFull) {
  ResponseCache cache(8);
  cache.Put(CachedRef{0, 1}, Allreduce(1, "w", {4}));
  WorkerNegotiator n(1, &cache);
  n.Submit(Allreduce(1, "w", {5}));
  auto batch = n.TakeBatch();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->requests.size(), 1u);
  EXPECT_TRUE(batch->cached.empty());
}

TEST(WorkerNegotiatorTest, ShutdownRidesTheNextBatchOnce) {
  ResponseCache cache(8);
  WorkerNegotiator n(2, &cache);
  n.Submit(Allreduce(2, "last"));
  n.RequestShutdown();
  auto batch = n.TakeBatch();
  ASSERT_TRUE(batch.has_value());
  EXPECT_TRUE(batch->shutdown);
  EXPECT_EQ(batch->requests.size(), 1u) << "what was queued before goes along";
  n.RequestShutdown();
  EXPECT_FALSE(n.TakeBatch().has_value()) << "asked once";
}

TEST(WorkerNegotiatorTest, ResendAnswersThisRanksRefsForPendingTensorsOnce) {
  ResponseCache cache(8);
  cache.Put(CachedRef{0, 1}, Allreduce(1, "w"));
  cache.Put(CachedRef{1, 1}, Allreduce(1, "done"));
  WorkerNegotiator n(1, &cache);
  Request w = Allreduce(1, "w");
  w.eager = true;
  w.data = std::string(16, '\x01');
  n.Submit(w);
  n.Submit(Allreduce(1, "done"));
  ASSERT_TRUE(n.TakeBatch().has_value());

  ResponseList list;
  list.resend = {{2, 0, 1},   // another rank's ref
                 {1, 0, 1},   // ours: "w"
                 {1, 1, 1},   // ours, but "done" has finished meanwhile
                 {1, 7, 7}};  // never sent
  auto again = n.Receive(list, Pending({w}));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->rank, 1);
  ASSERT_EQ(again->requests.size(), 1u);
  EXPECT_EQ(again->requests[0].name, "w");
  EXPECT_TRUE(again->requests[0].eager) << "the payload travels again with the full request";
  EXPECT_EQ(again->requests[0].data, w.data);
  EXPECT_TRUE(again->cached.empty());
  EXPECT_FALSE(n.Receive(list, Pending({w})).has_value()) << "a ref is resent once";
  EXPECT_EQ(n.refs_in_flight(), 0u);
}

TEST(WorkerNegotiatorTest, CacheToggleSwitchesTheReplica) {
  ResponseCache cache(8);
  cache.Put(CachedRef{0, 1}, Allreduce(1, "w"));
  WorkerNegotiator n(1, &cache);
  ResponseList off;
  off.cache = CacheToggle::kOff;
  EXPECT_FALSE(n.Receive(off, {}).has_value());
  EXPECT_FALSE(cache.enabled());
  n.Submit(Allreduce(1, "w"));
  auto batch = n.TakeBatch();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->requests.size(), 1u) << "off forgets every entry";

  ResponseList unchanged;
  n.Receive(unchanged, {});
  EXPECT_FALSE(cache.enabled());
  ResponseList on;
  on.cache = CacheToggle::kOn;
  n.Receive(on, {});
  EXPECT_TRUE(cache.enabled());
}

// A runner that runs nothing: the end-to-end test below only needs the dispatcher's cache filling.
class NoRunner : public ResponseRunner {
 public:
  bool has_lanes() const override { return false; }
  void RunOnLane(const Response&, EntryMap) override {}
  Status DrainLanes() override { return Status::OK(); }
  Status RunHere(const Response& r, EntryMap& entries) override {
    for (const std::string& name : r.names) entries.erase(name);
    return Status::OK();
  }
};

// Rank 0's coordinator and rank 1's negotiator exchange serialized messages, as over the wire.
class WorkerAndCoordinator : public ::testing::Test {
 protected:
  // One step: rank 0 submits `name` directly, rank 1 through its negotiator; returns rank 1's
  // batch as sent and the released list as rank 1 parses it, after dispatching it there.
  std::pair<RequestList, ResponseList> Step(const std::string& name) {
    coordinator_.Add(Allreduce(0, name), t0_);
    worker_entries_[name].request = Allreduce(1, name);
    worker_.Submit(worker_entries_[name].request);
    auto batch = worker_.TakeBatch();
    EXPECT_TRUE(batch.has_value());
    Deliver(*batch);
    return {*batch, Release()};
  }
  void Deliver(const RequestList& batch) {
    auto parsed = ParseRequestList(SerializeRequestList(batch));
    ASSERT_TRUE(parsed.ok());
    coordinator_.Receive(*parsed, t0_);
  }
  ResponseList Release() {
    auto list = ParseResponseList(SerializeResponseList(coordinator_.Compute(t0_)));
    EXPECT_TRUE(list.ok());
    if (auto again = worker_.Receive(*list, worker_entries_)) Deliver(*again);
    EXPECT_TRUE(dispatcher_.Dispatch(list->responses, worker_entries_).ok());
    return *list;
  }

  Clock::time_point t0_ = Clock::now();
  ResponseCache coordinator_cache_{1};  // one slot: a second tensor evicts the first
  ResponseCache replica_{1};
  Coordinator coordinator_{2, 1 << 20, microseconds(0), &coordinator_cache_};
  WorkerNegotiator worker_{1, &replica_};
  NoRunner runner_;
  ResponseDispatcher dispatcher_{&runner_, nullptr, &replica_, nullptr};
  EntryMap worker_entries_;
};

TEST_F(WorkerAndCoordinator, SecondStepSendsARefAndAReassignedSlotIsResent) {
  auto [first_batch, first] = Step("w");
  EXPECT_EQ(first_batch.requests.size(), 1u);
  ASSERT_EQ(first.responses.size(), 1u);
  ASSERT_EQ(first.responses[0].cache_slots.size(), 1u) << "the coordinator assigned a slot";

  auto [second_batch, second] = Step("w");
  EXPECT_TRUE(second_batch.requests.empty());
  EXPECT_EQ(second_batch.cached.size(), 1u) << "the replica learned the slot from the response";
  ASSERT_EQ(second.responses.size(), 1u);
  EXPECT_EQ(second.responses[0].names, std::vector<std::string>{"w"});

  // Rank 1 sends its ref for "w" while rank 0's cache already gave the slot to "v".
  worker_entries_["w"].request = Allreduce(1, "w");
  worker_.Submit(worker_entries_["w"].request);
  auto stale = worker_.TakeBatch();
  ASSERT_TRUE(stale.has_value());
  ASSERT_EQ(stale->cached.size(), 1u);
  coordinator_cache_.Assign(Allreduce(0, "v"));
  Deliver(*stale);
  coordinator_.Add(Allreduce(0, "w"), t0_);
  ResponseList resend = Release();  // carries the resend; the worker answers it in full
  ASSERT_EQ(resend.resend.size(), 1u);
  EXPECT_EQ(resend.resend[0].rank, 1);
  EXPECT_TRUE(resend.responses.empty());
  ResponseList released = Release();
  ASSERT_EQ(released.responses.size(), 1u);
  EXPECT_EQ(released.responses[0].names, std::vector<std::string>{"w"});
  EXPECT_TRUE(worker_entries_.empty());
}

}  // namespace
}  // namespace core
}  // namespace dadt
