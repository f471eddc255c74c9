// RunRanks: run one rank per thread, each with its own Backend, for backend tests.
//
// Every thread creates its Backend through BackendRegistry (the way the runtime does), all of
// them rendezvousing through one shared InMemoryKeyValueStore under a prefix unique to this call,
// then runs `body(rank, backend)`. Backends are destroyed only after every rank's body has
// returned, so that no rank tears down connections a slower peer is still reading from.
//
//   RunRanks("gloo", 4, [](int rank, Backend& b) { EXPECT_OK(b.Barrier()); });
//
// A rank whose Backend cannot be created records a test failure and skips its body.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "runtime/backends/backend.h"

#define EXPECT_OK(expr)                                  \
  do {                                                   \
    const ::dadt::Status _s = (expr);                    \
    EXPECT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

namespace dadt {
namespace testutil {

using RankBody = std::function<void(int rank, backends::Backend& backend)>;

// `tweak`, when given, adjusts each rank's BackendOptions before the backend is created (threads
// only; an installed RankRunner ignores it).
using OptionsTweak = std::function<void(backends::BackendOptions&)>;
void RunRanks(const std::string& backend, int size, const RankBody& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(60),
              const OptionsTweak& tweak = nullptr);

// How RunRanks runs the ranks of a backend: threads in this process unless a runner is installed
// for it (an MPI test binary installs one that uses the processes mpirun started).
class RankRunner {
 public:
  virtual ~RankRunner() = default;
  // The largest world size Run can serve.
  virtual int MaxRanks() const = 0;
  virtual void Run(const std::string& backend, int size, const RankBody& body,
                   std::chrono::milliseconds timeout) = 0;
  // A counter every rank of the next Run sees; Run zeroes it before any body starts.
  virtual std::atomic<int>& SharedCounter() = 0;
};
// Installs `runner` (not owned; null removes it) for `backend`.
void SetRankRunner(const std::string& backend, RankRunner* runner);
int MaxRanks(const std::string& backend);
std::atomic<int>& SharedCounter(const std::string& backend);

// A prefix no other RunRanks call in this process uses ("test/<n>/").
std::string UniqueStorePrefix();

}  // namespace testutil
}  // namespace dadt
