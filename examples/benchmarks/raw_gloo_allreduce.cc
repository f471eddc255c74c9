// raw_gloo_allreduce: the "raw Gloo" baseline for dadt's allreduce benchmarks.
//
// Runs plain gloo::allreduce (AllreduceOptions, gloo::sum<float>, in place, Gloo's default ring
// algorithm) on a TCP device bound to 127.0.0.1. It deliberately does not go through dadt's
// Backend, so dadt's numbers can be compared with what Gloo alone achieves on the same machine.
// Launched once per rank (by dadtrun, or by hand) with DADT_RANK and DADT_SIZE in the
// environment; the ranks meet through Gloo's FileStore in a directory they all see, which must
// be empty (stale address files from an earlier run would be read as this run's):
//
//   DADT_RANK=0 DADT_SIZE=2 raw_gloo_allreduce --store-dir /tmp/s &
//   DADT_RANK=1 DADT_SIZE=2 raw_gloo_allreduce --store-dir /tmp/s
//
// Flags: --store-dir DIR (required), --sizes 4,4096,67108864 (bytes, multiples of 4),
// --iters N (timed iterations, default 20), --warmup W (default 5), --timeout-s S (default 60).
//
// Rank 0 prints one JSON object per size and line:
//   {"size_bytes":4096,"median_us":190.2,"busbw_gbps":0.043,...}
// Each iteration is timed on its own and the median reported, so one slow iteration on a shared
// machine does not skew the result. busbw_gbps is nccl-tests' bus bandwidth in GB/s (1e9 bytes/s):
// 2(n-1)/n * bytes / median time, the traffic per rank of a ring allreduce, which makes numbers
// comparable across rank counts. Iterations run back to back with no barrier between them, as a
// training loop issues them; the allreduce itself keeps the ranks in step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

struct Flags {
  std::string store_dir;
  std::vector<long long> sizes = {4, 4096, 67108864};
  int iters = 20;
  int warmup = 5;
  int timeout_s = 60;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "raw_gloo_allreduce: %s\nusage: DADT_RANK=r DADT_SIZE=n raw_gloo_allreduce "
               "--store-dir DIR [--sizes B1,B2,...] [--iters N] [--warmup W] [--timeout-s S]\n",
               why.c_str());
  std::exit(2);
}

long long ParseInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0) Usage("bad " + what + ": '" + text + "'");
  return v;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage("missing value for " + arg);
    const std::string value = argv[++i];
    if (arg == "--store-dir") {
      f.store_dir = value;
    } else if (arg == "--sizes") {
      f.sizes.clear();
      size_t start = 0;
      while (start <= value.size()) {
        const size_t comma = std::min(value.find(',', start), value.size());
        const long long bytes = ParseInt(value.substr(start, comma - start), "size");
        if (bytes == 0 || bytes % 4 != 0) Usage("sizes must be positive multiples of 4 (float32)");
        f.sizes.push_back(bytes);
        start = comma + 1;
      }
    } else if (arg == "--iters") {
      f.iters = static_cast<int>(ParseInt(value, "--iters"));
    } else if (arg == "--warmup") {
      f.warmup = static_cast<int>(ParseInt(value, "--warmup"));
    } else if (arg == "--timeout-s") {
      f.timeout_s = static_cast<int>(ParseInt(value, "--timeout-s"));
    } else {
      Usage("unknown flag " + arg);
    }
  }
  if (f.store_dir.empty()) Usage("--store-dir is required");
  if (f.iters < 1) Usage("--iters must be at least 1");
  return f;
}

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) Usage(std::string(name) + " is not set");
  return static_cast<int>(ParseInt(v, name));
}

void Allreduce(const std::shared_ptr<gloo::Context>& context, float* data, size_t count) {
  if (context->size == 1) return;  // nothing to exchange (and Gloo's ring needs a peer)
  gloo::AllreduceOptions opts(context);
  opts.setOutput(data, count);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

int Run(const Flags& flags, int rank, int size) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(flags.timeout_s));
  if (size > 1) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(flags.store_dir);
    context->connectFullMesh(store, device);
  }

  for (long long bytes : flags.sizes) {
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    std::vector<float> buf(count, static_cast<float>(rank + 1));
    // One checked run first: every element must be 1 + 2 + ... + n.
    Allreduce(context, buf.data(), count);
    const float want = static_cast<float>(size) * (size + 1) / 2;
    if (std::any_of(buf.begin(), buf.end(), [want](float v) { return v != want; })) {
      std::fprintf(stderr, "rank %d: wrong allreduce result for %lld bytes\n", rank, bytes);
      return 1;
    }
    std::fill(buf.begin(), buf.end(), 0.0f);  // zeros stay zeros: no overflow however long we run
    for (int i = 0; i < flags.warmup; ++i) Allreduce(context, buf.data(), count);
    std::vector<double> us(flags.iters);
    for (int i = 0; i < flags.iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      Allreduce(context, buf.data(), count);
      us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count();
    }
    std::sort(us.begin(), us.end());
    const size_t n = us.size();
    const double median = n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2;
    const double algbw = static_cast<double>(bytes) / (median * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0) {
      std::printf(
          "{\"size_bytes\":%lld,\"median_us\":%.1f,\"busbw_gbps\":%.4f,\"algbw_gbps\":%.4f,"
          "\"min_us\":%.1f,\"max_us\":%.1f,\"ranks\":%d,\"iters\":%d,\"impl\":\"raw_gloo\"}\n",
          bytes, median, busbw, algbw, us.front(), us.back(), size, flags.iters);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  const int rank = EnvInt("DADT_RANK");
  const int size = EnvInt("DADT_SIZE");
  if (size < 1 || rank >= size) Usage("need DADT_SIZE >= 1 and DADT_RANK < DADT_SIZE");
  try {
    return Run(flags, rank, size);
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet, ...
    std::fprintf(stderr, "raw_gloo_allreduce rank %d: %s\n", rank, e.what());
    return 1;
  }
}
