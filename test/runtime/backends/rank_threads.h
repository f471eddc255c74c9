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

void RunRanks(const std::string& backend, int size, const RankBody& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A prefix no other RunRanks call in this process uses ("test/<n>/").
std::string UniqueStorePrefix();

}  // namespace testutil
}  // namespace dadt
