// SetBackends seen from one rank (set_backends.h): an add whose members never come fails the
// add's handle with the connect error and leaves the set registered but broken, so that its
// collectives fail with that error instead of hanging, and a remove still works; a non-member
// skips a set's collectives; ReleaseAll leaves the global set only.
#include "runtime/core/set_backends.h"

#include <gtest/gtest.h>

#include "test/runtime/backends/in_memory_kv_store.h"
#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace core {
namespace {

// Rank 0 of a job of 3 whose other ranks never come.
backends::BackendOptions JobOptions(KeyValueStore* store) {
  backends::BackendOptions job;
  job.rank = job.local_rank = 0;
  job.size = job.local_size = 3;
  job.store = store;
  job.store_prefix = testutil::UniqueStorePrefix();
  job.timeout = std::chrono::milliseconds(300);
  job.connect_timeout = std::chrono::milliseconds(300);
  return job;
}

class SetBackendsTest : public ::testing::Test {
 protected:

  // An entry of this rank for `name` in set `set`, with a fresh handle.
  int64_t Submit(const std::string& name, int32_t set, OpType op) {
    TensorEntry e;
    e.request.name = name;
    e.request.op = op;
    e.request.process_set_id = set;
    e.request.shape = {1};
    e.input = e.output = &value_;
    e.handle = handles_.Create();
    const int64_t h = e.handle;
    EXPECT_TRUE(queue_.Push(e).ok());
    entries_.emplace(EntryKey(set, name), std::move(e));
    return h;
  }

  Response Make(Response::Type type, const std::string& name, int32_t set) {
    Response r;
    r.type = type;
    r.names = {name};
    r.process_set_id = set;
    return r;
  }

  testutil::InMemoryKeyValueStore store_;
  backends::BackendOptions job_ = JobOptions(&store_);
  HandleTable handles_;
  TensorQueue queue_;
  Executor global_{nullptr, 0, 3, &handles_, &queue_};
  SetBackends sets_{"gloo", job_, &global_, &handles_, &queue_, nullptr};
  EntryMap entries_;
  float value_ = 1.f;
};

TEST_F(SetBackendsTest, AFailedConnectBreaksTheSetWithoutHangingAndRemoveStillWorks) {
  const int64_t add = Submit("dadt.process_set.0", 0, OpType::kProcessSetAdd);
  Response added = Make(Response::Type::kProcessSetAdd, "dadt.process_set.0", 0);
  added.root = 1;
  added.sizes = {0, 1};
  Status applied = sets_.ApplyFromLoop(added, entries_);
  ASSERT_TRUE(applied.ok()) << "a connect failure is the handle's: " << applied.ToString();
  Status s = handles_.Wait(add);
  EXPECT_NE(s.message().find("process set 1 (ranks [0, 1]) could not connect its data plane"),
            std::string::npos) << s.ToString();
  ASSERT_TRUE(sets_.Find(1).has_value()) << "registered, broken";

  const int64_t w = Submit("w", 1, OpType::kAllreduce);
  Response reduce = Make(Response::Type::kAllreduce, "w", 1);
  reduce.sizes = {1};
  ASSERT_TRUE(sets_.ExecuteFromLoop(reduce, entries_).ok());
  EXPECT_EQ(handles_.Wait(w).message(), s.message());
  EXPECT_TRUE(entries_.empty());

  const int64_t rm = Submit("dadt.process_set.1", 0, OpType::kProcessSetRemove);
  Response removed = Make(Response::Type::kProcessSetRemove, "dadt.process_set.1", 0);
  removed.root = 1;
  removed.sizes = {1};
  ASSERT_TRUE(sets_.ApplyFromLoop(removed, entries_).ok());
  EXPECT_TRUE(handles_.Wait(rm).ok());
  EXPECT_EQ(handles_.IntResult(rm), 1);
  EXPECT_FALSE(sets_.Find(1).has_value());
}

TEST_F(SetBackendsTest, ANonMemberSkipsTheSetsCollectivesAndReleaseAllKeepsTheGlobalSet) {
  Response added = Make(Response::Type::kProcessSetAdd, "dadt.process_set.0", 0);
  added.root = 1;
  added.sizes = {1};  // rank 1 only: this rank creates nothing
  ASSERT_TRUE(sets_.ApplyFromLoop(added, entries_).ok());
  EXPECT_FALSE(sets_.Find(1)->included());
  Response reduce = Make(Response::Type::kAllreduce, "w", 1);
  reduce.sizes = {1};
  EXPECT_TRUE(sets_.ExecuteFromLoop(reduce, entries_).ok());

  Response diverged = added;  // the coordinator says id 1 again: this rank's table assigns 2
  diverged.sizes = {0};
  EXPECT_EQ(sets_.ApplyFromLoop(diverged, entries_).code(), StatusCode::kInternal);

  sets_.ReleaseAll();
  EXPECT_EQ(sets_.ids(), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace core
}  // namespace dadt
