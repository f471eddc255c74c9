// Stands in for the CUDA tests when the build was configured without CUDA (no nvcc or NCCL found,
// or DADT_CUDA=0; see tools/configure_cuda.py).
#include <gtest/gtest.h>

TEST(CudaBuild, NotConfigured) {
  GTEST_SKIP() << "dadt was configured without CUDA/NCCL (tools/configure_cuda.py found no nvcc "
                  "or NCCL, or DADT_CUDA=0)";
}
