// The backend conformance suite on Gloo, ranks as threads in this process: every rank is on this
// host, so allreduces go through shared memory (gloo/shm_allreduce.h); the _noshm runs keep
// Gloo's TCP ring covered.
#include "test/runtime/backends/backend_conformance.h"

namespace dadt {
namespace backends {
namespace conformance {

INSTANTIATE_TEST_SUITE_P(Gloo, BackendConformanceTest,
                         ::testing::Values(Param{"gloo", 1}, Param{"gloo", 2}, Param{"gloo", 3},
                                           Param{"gloo", 4}, Param{"gloo", 2, false},
                                           Param{"gloo", 3, false}),
                         ParamName);

}  // namespace conformance
}  // namespace backends
}  // namespace dadt
