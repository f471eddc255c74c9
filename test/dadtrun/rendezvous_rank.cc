// A tiny rank program for dadtrun_test: connects to dadtrun's rendezvous server from the
// environment, announces itself, reads every other rank's announcement and counts itself in.
// Prints "rank R of N saw K peers, count C" and exits 0, or prints the error and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/common/rendezvous/client.h"

int main() {
  using std::chrono::milliseconds;
  const char* rank_s = std::getenv("DADT_RANK");
  const char* size_s = std::getenv("DADT_SIZE");
  if (!rank_s || !size_s) {
    std::fprintf(stderr, "DADT_RANK/DADT_SIZE not set\n");
    return 1;
  }
  const int rank = std::atoi(rank_s), size = std::atoi(size_s);
  auto client = dadt::rendezvous::ConnectFromEnv(milliseconds(10000));
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto& c = **client;
  dadt::Status s = c.Set("hello/" + std::to_string(rank), "from " + std::to_string(rank));
  if (s.ok()) s = c.Set("ready/" + std::to_string(rank), "1");
  if (!s.ok()) {
    std::fprintf(stderr, "set: %s\n", s.ToString().c_str());
    return 1;
  }
  int peers = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    auto v = c.Get("hello/" + std::to_string(r), milliseconds(10000));
    if (!v.ok() || *v != "from " + std::to_string(r)) {
      std::fprintf(stderr, "get: %s\n", v.status().ToString().c_str());
      return 1;
    }
    ++peers;
  }
  auto count = c.Add("count", 1);
  if (!count.ok()) {
    std::fprintf(stderr, "add: %s\n", count.status().ToString().c_str());
    return 1;
  }
  std::printf("rank %d of %d saw %d peers\n", rank, size, peers);
  return 0;
}
