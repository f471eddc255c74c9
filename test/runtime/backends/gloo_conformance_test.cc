// The backend conformance suite on Gloo, ranks as threads in this process.
#include "test/runtime/backends/backend_conformance.h"

namespace dadt {
namespace backends {
namespace conformance {

INSTANTIATE_TEST_SUITE_P(Gloo, BackendConformanceTest,
                         ::testing::Values(Param{"gloo", 1}, Param{"gloo", 2}, Param{"gloo", 3},
                                           Param{"gloo", 4}),
                         ParamName);

}  // namespace conformance
}  // namespace backends
}  // namespace dadt
