// DeviceExecutor (runtime/core/device_executor.h) without a GPU: the test registers a device
// implementation whose "device memory" is host memory (HostDeviceContext below) and drives the
// real Gloo engine through it as the device engine, with ranks as threads, so that the
// executor's own logic runs for real: fusion copies with zeros for a joined rank, scaling and
// Average on the device, the order "wait for the framework streams, then work", outputs that
// are device memory of the entry's GPU, and completion through the context. A fake engine
// covers failures: a failed enqueue completes every entry and breaks the job; an asynchronous
// engine error fails the handles, drops their outputs and aborts the engine. Through the host
// Executor: a tensor on a second GPU is refused naming it, and a joined rank picks the GPU of
// its local rank. The fake context runs OnComplete's callback at once, on the calling thread
// (a real one runs it on its completion thread once the device has passed the work).
#include "runtime/core/device_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/reduce.h"
#include "runtime/core/executor.h"
#include "test/runtime/backends/in_memory_kv_store.h"
#include "test/runtime/backends/rank_threads.h"
#include "test/runtime/core/executor_test_util.h"

namespace dadt {
namespace core {
namespace {

using backends::CopySpan;
using backends::DeviceContext;
using backends::DeviceOptions;
constexpr int kVisibleDevices = 2;

class HostDeviceContext : public DeviceContext {
 public:
  explicit HostDeviceContext(DeviceOptions o) : o_(std::move(o)) {}
  int device() const override { return o_.device; }
  uintptr_t stream() const override { return 0x5000 + o_.device; }
  Status WaitForStream(uintptr_t s) override {
    ops.push_back("wait:" + std::to_string(s));
    return Status::OK();
  }
  Status Copy(const std::vector<CopySpan>& spans) override {
    ops.push_back("copy");
    for (const CopySpan& c : spans) {
      if (c.bytes == 0) continue;
      if (c.src) {
        std::memcpy(c.dst, c.src, c.bytes);
      } else {
        std::memset(c.dst, 0, c.bytes);
      }
    }
    return Status::OK();
  }
  Status Scale(void* buf, int64_t n, DataType dtype, double factor) override {
    ops.push_back("scale");
    return n == 0 || factor == 1.0 ? Status::OK() : ScaleBuffer(buf, n, dtype, factor);
  }
  Status Divide(void* buf, int64_t n, DataType dtype, int64_t divisor) override {
    ops.push_back("divide");
    return DivideBuffer(buf, n, dtype, divisor);
  }
  Status Cast(const void*, DataType, void*, DataType, int64_t) override {
    return Unimplemented("not needed here");
  }
  StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes, Use) override {
    if (bytes == 0) return std::shared_ptr<void>();
    return std::shared_ptr<void>(std::malloc(bytes), std::free);
  }
  void OnComplete(std::function<void(Status)> done) override {
    ops.push_back("complete");
    if (failure_.ok() && o_.health) {
      failure_ = o_.health();
      if (!failure_.ok() && o_.on_failure) o_.on_failure();
    }
    done(failure_);
  }

  std::vector<std::string> ops;  // what the executor asked for, in order

 private:
  DeviceOptions o_;
  Status failure_;
};

// The context most recently created on this thread (each rank is one thread).
thread_local HostDeviceContext* last_context = nullptr;

const bool kDeviceRegistered = [] {
  backends::DeviceRegistry::Impl impl;
  impl.name = "HOST-FAKE";
  impl.visible_devices = [](std::string*) { return kVisibleDevices; };
  impl.create = [](const DeviceOptions& o) -> StatusOr<std::unique_ptr<DeviceContext>> {
    auto ctx = std::make_unique<HostDeviceContext>(o);
    last_context = ctx.get();
    return std::unique_ptr<DeviceContext>(std::move(ctx));
  };
  impl.nccl_version = [] { return 0; };
  return backends::DeviceRegistry::Register(std::move(impl));
}();

// A one-rank device engine whose failures the test sets.
struct FakeEngineState {
  Status enqueue;  // what each collective returns
  Status async;    // what AsyncError returns
  int aborts = 0;
};
FakeEngineState fake_engine;

class FakeEngine : public backends::Backend {
 public:
  const char* Name() const override { return "FAKE"; }
  Status Allreduce(void*, int64_t, DataType, ReduceOp) override { return fake_engine.enqueue; }
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& b) override {
    if (fake_engine.enqueue.ok() && b[0]) std::memcpy(out, in, b[0]);
    return fake_engine.enqueue;
  }
  Status Broadcast(void*, int64_t, int) override { return fake_engine.enqueue; }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*,
                   const std::vector<int64_t>&) override {
    return fake_engine.enqueue;
  }
  Status Reducescatter(const void*, void*, const std::vector<int64_t>&, DataType,
                       ReduceOp) override {
    return fake_engine.enqueue;
  }
  Status Barrier() override { return fake_engine.enqueue; }
  Status AsyncError() override { return fake_engine.async; }
  void Abort() override { ++fake_engine.aborts; }
};

const bool kEngineRegistered = backends::BackendRegistry::Register(
    "fake_device_engine", [](const backends::BackendOptions&) -> StatusOr<std::unique_ptr<backends::Backend>> {
      return std::unique_ptr<backends::Backend>(new FakeEngine);
    });

// What the executor completed, by tensor name.
struct Completions {
  DeviceExecutor::Completer completer() {
    return [this](const std::string& name, int64_t handle, HandleResult r) {
      std::lock_guard<std::mutex> lock(mu);
      ++count[name];
      handles[name] = handle;
      results[name] = std::move(r);
    };
  }
  std::mutex mu;
  std::map<std::string, int> count;
  std::map<std::string, int64_t> handles;
  std::map<std::string, HandleResult> results;
};

TensorEntry Entry(OpType op, const std::string& name, DataType dtype, Shape shape, const void* in,
                  void* out, int device = 0, uintptr_t stream = 0) {
  TensorEntry e;
  e.request.op = op;
  e.request.name = name;
  e.request.dtype = dtype;
  e.request.shape = std::move(shape);
  e.request.device = device;
  e.input = in;
  e.output = out;
  e.stream = stream;
  static std::atomic<int64_t> next_handle{100};
  e.handle = next_handle++;
  return e;
}

// The host tests' response (executor_test_util.h), on device 0.
Response Make(Response::Type type, std::vector<std::string> names, std::vector<int64_t> sizes,
              DataType dtype = DataType::kFloat32, ReduceOp op = ReduceOp::kSum) {
  Response r = testing_executor::Make(type, std::move(names), std::move(sizes), dtype, op);
  r.device = 0;
  return r;
}

backends::BackendOptions Options(int rank, int size, KeyValueStore* store) {
  backends::BackendOptions o;
  o.rank = rank;
  o.size = size;
  o.local_rank = rank;
  o.local_size = size;
  o.timeout = std::chrono::seconds(60);
  o.store = store;
  o.store_prefix = testutil::UniqueStorePrefix();
  return o;
}

// Runs body(rank, options) on `size` threads sharing one store; each rank's engine is torn down
// only after every rank's body returned (`hold` keeps what the body creates alive until then).
void RunDeviceRanks(int size,
                    const std::function<void(int, const backends::BackendOptions&,
                                             std::shared_ptr<void>* hold)>& body) {
  testutil::InMemoryKeyValueStore store;
  const std::string prefix = testutil::UniqueStorePrefix();
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      backends::BackendOptions o = Options(rank, size, &store);
      o.store_prefix = prefix;
      std::shared_ptr<void> hold;
      body(rank, o, &hold);
      std::unique_lock<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
      cv.wait(lock, [&] { return finished == size; });
    });
  }
  for (auto& t : threads) t.join();
}

std::unique_ptr<DeviceExecutor> CreateOrFail(const std::string& engine, int device,
                                             const backends::BackendOptions& o, Completions& c) {
  auto x = DeviceExecutor::Create(engine, device, o, c.completer());
  EXPECT_TRUE(x.ok()) << x.status().ToString();
  return x.ok() ? std::move(*x) : nullptr;
}

TEST(DeviceExecutor, UnknownEngineIsRefusedNamingIt) {
  testutil::InMemoryKeyValueStore store;
  Completions c;
  auto x = DeviceExecutor::Create("no-such-engine", 0, Options(0, 1, &store), c.completer());
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(x.status().message().find("no-such-engine"), std::string::npos);
}

class DeviceExecutorGlooTest : public ::testing::TestWithParam<int> {};

TEST_P(DeviceExecutorGlooTest, FusedAllreduceAveragesEachTensorWithZerosFromAJoinedRank) {
  const int n = GetParam();
  const std::vector<int64_t> counts = {3, 0, 5};
  RunDeviceRanks(n, [&](int rank, const backends::BackendOptions& o, std::shared_ptr<void>* hold) {
    auto c = std::make_shared<Completions>();
    auto x = CreateOrFail("gloo", rank % kVisibleDevices, o, *c);
    ASSERT_NE(x, nullptr);
    const bool joined = n > 1 && rank == n - 1;
    std::vector<std::vector<float>> in(counts.size()), out(counts.size());
    std::vector<TensorEntry> entries;
    std::vector<TensorEntry*> mine;
    std::vector<std::string> names;
    for (size_t t = 0; t < counts.size(); ++t) {
      for (int64_t i = 0; i < counts[t]; ++i) in[t].push_back(static_cast<float>(rank + 1 + 10 * i));
      out[t].assign(counts[t], -1.0f);
      names.push_back("g" + std::to_string(t));
      entries.push_back(Entry(OpType::kAllreduce, names.back(), DataType::kFloat32, {counts[t]},
                              in[t].data(), out[t].data(), rank % kVisibleDevices));
    }
    for (auto& e : entries) mine.push_back(joined ? nullptr : &e);
    Response r = Make(Response::Type::kAllreduce, names, counts, DataType::kFloat32, ReduceOp::kAverage);
    r.postscale = 2.0;
    ASSERT_TRUE(x->Execute(r, mine).ok());
    if (joined) {
      EXPECT_TRUE(c->count.empty()) << "a joined rank has no handles to complete";
    } else {
      // Ranks 0 .. m-1 contribute (m = n, or n - 1 when the last joined), the joined one zeros.
      const int m = n > 1 ? n - 1 : 1;
      for (size_t t = 0; t < counts.size(); ++t) {
        EXPECT_EQ(c->count[names[t]], 1) << names[t];
        EXPECT_TRUE(c->results[names[t]].status.ok()) << c->results[names[t]].status.ToString();
        EXPECT_EQ(c->handles[names[t]], entries[t].handle);
        for (int64_t i = 0; i < counts[t]; ++i) {
          const float sum = m * (m + 1) / 2.0f + m * 10.0f * i;
          EXPECT_FLOAT_EQ(out[t][i], 2.0f * sum / n) << names[t] << "[" << i << "]";
        }
      }
    }
    *hold = std::shared_ptr<DeviceExecutor>(std::move(x));
  });
}

TEST_P(DeviceExecutorGlooTest, OutputsAreDeviceMemoryOfTheEntrysGpuWithTheRightContents) {
  const int n = GetParam();
  RunDeviceRanks(n, [&](int rank, const backends::BackendOptions& o, std::shared_ptr<void>* hold) {
    Completions c;
    const int gpu = rank % kVisibleDevices;
    auto x = CreateOrFail("gloo", gpu, o, c);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->device(), gpu);
    // Allgather: rank r has r + 1 rows of value r.
    std::vector<int32_t> gin(rank + 1, rank);
    TensorEntry ag = Entry(OpType::kAllgather, "ag", DataType::kInt32, {rank + 1}, gin.data(),
                           nullptr, gpu);
    std::vector<int64_t> rows;
    for (int q = 0; q < n; ++q) rows.push_back(q + 1);
    ASSERT_TRUE(x->Execute(Make(Response::Type::kAllgather, {"ag"}, rows, DataType::kInt32), {&ag}).ok());
    // Reducescatter of n + 1 rows, prescaled by 3: the input must stay as it was.
    std::vector<float> rin(n + 1);
    for (int i = 0; i <= n; ++i) rin[i] = static_cast<float>(i + rank);
    const std::vector<float> rin_copy = rin;
    TensorEntry rs = Entry(OpType::kReducescatter, "rs", DataType::kFloat32, {n + 1}, rin.data(),
                           nullptr, gpu);
    Response rr = Make(Response::Type::kReducescatter, {"rs"}, {});
    rr.prescale = 3.0;
    ASSERT_TRUE(x->Execute(rr, {&rs}).ok());
    EXPECT_EQ(rin, rin_copy) << "prescale must not write into the caller's input";
    // Alltoall: rank r sends one row (value 10 r + j) to each rank j.
    std::vector<int64_t> ain, matrix(n * n, 1);
    for (int j = 0; j < n; ++j) ain.push_back(10 * rank + j);
    TensorEntry a2a = Entry(OpType::kAlltoall, "a2a", DataType::kInt64, {n}, ain.data(), nullptr, gpu);
    ASSERT_TRUE(x->Execute(Make(Response::Type::kAlltoall, {"a2a"}, matrix, DataType::kInt64), {&a2a}).ok());
    // Broadcast from the last rank.
    std::vector<int32_t> bin(2, rank), bout(2, -1);
    TensorEntry bc = Entry(OpType::kBroadcast, "bc", DataType::kInt32, {2}, bin.data(), bout.data(), gpu);
    Response br = Make(Response::Type::kBroadcast, {"bc"}, {}, DataType::kInt32);
    br.root = n - 1;
    ASSERT_TRUE(x->Execute(br, {&bc}).ok());

    for (const char* name : {"ag", "rs", "a2a", "bc"}) {
      EXPECT_EQ(c.count[name], 1) << name;
      EXPECT_TRUE(c.results[name].status.ok()) << name << ": " << c.results[name].status.ToString();
    }
    EXPECT_EQ(bout, (std::vector<int32_t>{n - 1, n - 1}));
    auto check_device = [&](const HostBuffer* b) {
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->device, gpu);
      EXPECT_EQ(b->data, nullptr);  // no host copy: the framework gets device memory
      EXPECT_EQ(b->ptr(), b->device_data.get());
    };
    const HostBuffer* g = c.results["ag"].output.get();
    check_device(g);
    EXPECT_EQ(g->shape, (Shape{n * (n + 1) / 2}));
    std::vector<int32_t> expected;
    for (int q = 0; q < n; ++q) expected.insert(expected.end(), q + 1, q);
    EXPECT_EQ(std::vector<int32_t>(static_cast<int32_t*>(g->ptr()),
                                   static_cast<int32_t*>(g->ptr()) + expected.size()),
              expected);
    const HostBuffer* s = c.results["rs"].output.get();
    check_device(s);
    const int64_t my_rows = (n + 1) / n + (rank < (n + 1) % n ? 1 : 0);
    int64_t first = 0;
    for (int q = 0; q < rank; ++q) first += (n + 1) / n + (q < (n + 1) % n ? 1 : 0);
    EXPECT_EQ(s->shape, (Shape{my_rows}));
    for (int64_t i = 0; i < my_rows; ++i) {
      // sum over q of 3 (row + q)
      EXPECT_FLOAT_EQ(static_cast<float*>(s->ptr())[i], 3.0f * (n * (first + i) + n * (n - 1) / 2.0f));
    }
    const HostBuffer* t = c.results["a2a"].output.get();
    check_device(t);
    EXPECT_EQ(c.results["a2a"].received_splits, std::vector<int64_t>(n, 1));
    for (int j = 0; j < n; ++j) EXPECT_EQ(static_cast<int64_t*>(t->ptr())[j], 10 * j + rank);
    *hold = std::shared_ptr<DeviceExecutor>(std::move(x));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceExecutorGlooTest, ::testing::Values(1, 2, 3));

TEST(DeviceExecutor, WaitsForEachFrameworkStreamOnceBeforeAnyWork) {
  testutil::InMemoryKeyValueStore store;
  Completions c;
  auto x = CreateOrFail("gloo", 0, Options(0, 1, &store), c);
  ASSERT_NE(x, nullptr);
  HostDeviceContext* ctx = last_context;
  std::vector<float> a(2, 1), b(2, 2), d(2, 3);
  TensorEntry ea = Entry(OpType::kAllreduce, "a", DataType::kFloat32, {2}, a.data(), a.data(), 0, 5);
  TensorEntry eb = Entry(OpType::kAllreduce, "b", DataType::kFloat32, {2}, b.data(), b.data(), 0, 7);
  TensorEntry ed = Entry(OpType::kAllreduce, "d", DataType::kFloat32, {2}, d.data(), d.data(), 0, 5);
  ASSERT_TRUE(x->Execute(Make(Response::Type::kAllreduce, {"a", "b", "d"}, {2, 2, 2}), {&ea, &eb, &ed}).ok());
  ASSERT_GE(ctx->ops.size(), 3u);
  EXPECT_EQ(ctx->ops[0], "wait:5");
  EXPECT_EQ(ctx->ops[1], "wait:7");
  EXPECT_EQ(std::count(ctx->ops.begin(), ctx->ops.end(), "wait:5"), 1);
  EXPECT_EQ(ctx->ops.back(), "complete");  // the handles complete after all the work
  EXPECT_EQ(c.count.size(), 3u);
}

TEST(DeviceExecutor, FailedEnqueueCompletesEveryEntryAndBreaksTheJob) {
  fake_engine = FakeEngineState{};
  fake_engine.enqueue = Aborted("ncclInvalidUsage");
  testutil::InMemoryKeyValueStore store;
  Completions c;
  auto x = CreateOrFail("fake_device_engine", 0, Options(0, 1, &store), c);
  ASSERT_NE(x, nullptr);
  std::vector<float> a(2), b(3);
  TensorEntry ea = Entry(OpType::kAllreduce, "a", DataType::kFloat32, {2}, a.data(), a.data());
  TensorEntry eb = Entry(OpType::kAllreduce, "b", DataType::kFloat32, {3}, b.data(), b.data());
  Status s = x->Execute(Make(Response::Type::kAllreduce, {"a", "b"}, {2, 3}), {&ea, &eb});
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  for (const char* name : {"a", "b"}) {
    EXPECT_EQ(c.count[name], 1) << name << " must be completed exactly once";
    EXPECT_EQ(c.results[name].status.code(), StatusCode::kAborted);
  }
  fake_engine = FakeEngineState{};
}

TEST(DeviceExecutor, AsynchronousEngineErrorFailsTheHandlesDropsOutputsAndAbortsTheEngine) {
  fake_engine = FakeEngineState{};
  fake_engine.async = Aborted("NCCL: remote process exited");
  testutil::InMemoryKeyValueStore store;
  Completions c;
  auto x = CreateOrFail("fake_device_engine", 0, Options(0, 1, &store), c);
  ASSERT_NE(x, nullptr);
  std::vector<float> in(4, 1);
  TensorEntry e = Entry(OpType::kAllgather, "ag", DataType::kFloat32, {4}, in.data(), nullptr);
  EXPECT_TRUE(x->Execute(Make(Response::Type::kAllgather, {"ag"}, {4}), {&e}).ok());  // enqueued
  EXPECT_EQ(c.count["ag"], 1);
  EXPECT_EQ(c.results["ag"].status.code(), StatusCode::kAborted);
  EXPECT_NE(c.results["ag"].status.message().find("remote process exited"), std::string::npos);
  EXPECT_EQ(c.results["ag"].output, nullptr) << "an output the GPU never finished must not escape";
  EXPECT_EQ(fake_engine.aborts, 1);
  fake_engine = FakeEngineState{};
}

// The host Executor hands GPU responses to its DeviceExecutor (created at the first one).
TEST(DeviceExecutor, ExecutorRefusesATensorOnASecondGpuNamingIt) {
  testutil::InMemoryKeyValueStore store;
  HandleTable handles;
  TensorQueue queue;
  std::unique_ptr<backends::Backend> host(new FakeEngine);
  Executor ex(host.get(), 0, 1, &handles, &queue);
  ex.EnableDevice("gloo", Options(0, 1, &store));
  auto add = [&](TensorEntry e, EntryMap& m) {
    e.handle = handles.Create();
    EXPECT_TRUE(queue.Push(e).ok());
    queue.Drain();
    m.emplace(e.request.name, e);
    return e.handle;
  };
  EntryMap entries;
  std::vector<float> a = {1, 2}, b = {3};
  const int64_t ha = add(Entry(OpType::kAllreduce, "on.gpu0", DataType::kFloat32, {2}, a.data(), a.data(), 0), entries);
  EXPECT_TRUE(ex.Execute(Make(Response::Type::kAllreduce, {"on.gpu0"}, {2}), entries).ok());
  EXPECT_TRUE(handles.Wait(ha).ok());
  EXPECT_EQ(a, (std::vector<float>{1, 2}));  // one rank: the sum is the input
  const int64_t hb = add(Entry(OpType::kAllreduce, "on.gpu1", DataType::kFloat32, {1}, b.data(), b.data(), 1), entries);
  Response r = Make(Response::Type::kAllreduce, {"on.gpu1"}, {1});
  r.device = 1;
  EXPECT_TRUE(ex.Execute(r, entries).ok()) << "a refused tensor does not break the job";
  Status s = handles.Wait(hb);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'on.gpu1'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cuda:1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
  EXPECT_TRUE(entries.empty());
  ex.ReleaseDevice();
}

TEST(DeviceExecutor, JoinedRankUsesTheGpuOfItsLocalRank) {
  testutil::InMemoryKeyValueStore store;
  HandleTable handles;
  TensorQueue queue;
  std::unique_ptr<backends::Backend> host(new FakeEngine);
  Executor ex(host.get(), 0, 1, &handles, &queue);
  backends::BackendOptions o = Options(0, 1, &store);
  o.local_rank = 3;
  ex.EnableDevice("gloo", o);
  last_context = nullptr;
  EntryMap none;  // joined: no tensor of its own
  EXPECT_TRUE(ex.Execute(Make(Response::Type::kAllreduce, {"g"}, {4}), none).ok());
  ASSERT_NE(last_context, nullptr);
  EXPECT_EQ(last_context->device(), 3 % kVisibleDevices);
  ex.ReleaseDevice();
}

}  // namespace
}  // namespace core
}  // namespace dadt
