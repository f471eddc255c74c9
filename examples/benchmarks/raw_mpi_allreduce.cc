// raw_mpi_allreduce: the "raw MPI" baseline for dadt's allreduce benchmark on MPI.
//
// Plain MPI_Allreduce(MPI_IN_PLACE, float32, MPI_SUM, MPI_COMM_WORLD): the algorithm and
// transport are whatever the MPI library picks (Open MPI on one host: shared memory). It does not
// go through dadt, so dadt's MPI rows can be compared with what MPI alone achieves here.
//
//   mpirun -np 2 raw_mpi_allreduce --sizes 4,4096,67108864 --iters 20 --warmup 5
//
// Rank 0 prints one JSON object per size and line, with the same fields as raw_gloo_allreduce:
//   {"size_bytes":4096,"median_us":41.0,"busbw_gbps":0.1,...,"impl":"raw_mpi"}
// Every iteration is timed alone and the median reported; busbw is nccl-tests' bus bandwidth,
// 2(n-1)/n * bytes / median time. Iterations run back to back with no barrier, as a training loop
// issues them.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Options {
  std::vector<long long> sizes{4, 4096, 67108864};
  int iters = 20;
  int warmup = 5;
};

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--sizes") {
      o->sizes.clear();
      for (const char* p = value; *p;) {
        char* end = nullptr;
        const long long bytes = std::strtoll(p, &end, 10);
        if (end == p || bytes <= 0 || bytes % 4 != 0) return false;
        o->sizes.push_back(bytes);
        p = *end == ',' ? end + 1 : end;
      }
    } else if (flag == "--iters") {
      o->iters = std::atoi(value);
    } else if (flag == "--warmup") {
      o->warmup = std::atoi(value);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && o->iters > 0 && o->warmup >= 0 && !o->sizes.empty();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options opt;
  if (!ParseOptions(argc, argv, &opt)) {
    if (rank == 0) {
      std::fprintf(stderr, "usage: mpirun -np N raw_mpi_allreduce [--sizes B1,B2,...] "
                           "[--iters N] [--warmup W] (sizes: positive multiples of 4)\n");
    }
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  for (long long bytes : opt.sizes) {
    const int count = static_cast<int>(bytes / 4);
    std::vector<float> data(count, static_cast<float>(rank + 1));
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const float expect = 0.5f * size * (size + 1);
    if (std::count(data.begin(), data.end(), expect) != count) {
      std::fprintf(stderr, "rank %d: wrong MPI_Allreduce result for %lld bytes\n", rank, bytes);
      status = 1;
      break;
    }
    std::fill(data.begin(), data.end(), 0.0f);
    for (int w = 0; w < opt.warmup; ++w) {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    std::vector<double> times_us;
    for (int it = 0; it < opt.iters; ++it) {
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times_us.push_back((MPI_Wtime() - t0) * 1e6);
    }
    std::sort(times_us.begin(), times_us.end());
    const size_t k = times_us.size();
    const double med = k % 2 ? times_us[k / 2] : 0.5 * (times_us[k / 2 - 1] + times_us[k / 2]);
    const double alg = bytes / (med * 1e-6) / 1e9;
    if (rank == 0) {
      std::printf("{\"size_bytes\":%lld,\"median_us\":%.1f,\"busbw_gbps\":%.4f,\"algbw_gbps\":%.4f,"
                  "\"min_us\":%.1f,\"max_us\":%.1f,\"ranks\":%d,\"iters\":%d,\"impl\":\"raw_mpi\"}\n",
                  bytes, med, alg * 2.0 * (size - 1) / size, alg, times_us.front(),
                  times_us.back(), size, opt.iters);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return status;
}
