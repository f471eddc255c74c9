// The backend conformance suite's fixture (the TEST_Ps are in backend_conformance_test.cc): each
// backend's *_conformance_test.cc instantiates it with its name and world sizes.
//
//   INSTANTIATE_TEST_SUITE_P(Gloo, BackendConformanceTest,
//                            ::testing::Values(Param{"gloo", 1}, Param{"gloo", 2}), ParamName);
#pragma once

#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace backends {
namespace conformance {

struct Param {
  std::string backend;
  int size;
  bool shm_allreduce = true;  // engines that can reduce through shared memory (Gloo) may
};

inline void PrintTo(const Param& p, std::ostream* os) {
  *os << p.backend << " x" << p.size << (p.shm_allreduce ? "" : " (no shared memory)");
}

inline std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.backend + "_" + std::to_string(info.param.size) + "ranks" +
         (info.param.shm_allreduce ? "" : "_noshm");
}

class BackendConformanceTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const int most = testutil::MaxRanks(backend());
    if (size() > most) {
      GTEST_SKIP() << backend() << " x" << size() << " needs " << size()
                   << " processes; this launch has " << most;
    }
  }
  const std::string& backend() const { return GetParam().backend; }
  int size() const { return GetParam().size; }
  void Run(const testutil::RankBody& body) {
    const bool shm = GetParam().shm_allreduce;
    testutil::RunRanks(backend(), size(), body, std::chrono::seconds(60),
                       [shm](BackendOptions& o) { o.shm_allreduce = shm; });
  }
};

}  // namespace conformance
}  // namespace backends
}  // namespace dadt
