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
};

inline void PrintTo(const Param& p, std::ostream* os) { *os << p.backend << " x" << p.size; }

inline std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.backend + "_" + std::to_string(info.param.size) + "ranks";
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
  void Run(const testutil::RankBody& body) { testutil::RunRanks(backend(), size(), body); }
};

}  // namespace conformance
}  // namespace backends
}  // namespace dadt
