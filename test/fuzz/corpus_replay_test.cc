// Replays every checked-in fuzz corpus file through the fuzz body, and a deterministic batch of
// mutations of them, under gtest: the corpus stays a regression suite even without clang.
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test/fuzz/rendezvous_protocol_fuzz.h"

namespace dadt {
namespace rendezvous {
namespace {

constexpr char kCorpus[] = "test/fuzz/corpus/rendezvous_protocol";

std::vector<std::string> ReadCorpus() {
  std::vector<std::string> out;
  DIR* dir = opendir(kCorpus);
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string(kCorpus) + "/" + e->d_name, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    out.push_back(ss.str());
  }
  closedir(dir);
  return out;
}

void Replay(const std::string& input) {
  FuzzOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(RendezvousProtocolCorpus, EverySeedPasses) {
  std::vector<std::string> corpus = ReadCorpus();
  ASSERT_GE(corpus.size(), 8u) << "the seed corpus is missing from " << kCorpus;
  for (const std::string& input : corpus) Replay(input);
}

TEST(RendezvousProtocolCorpus, DeterministicMutationsPass) {
  std::vector<std::string> corpus = ReadCorpus();
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20261121);
  for (int i = 0; i < 20000; ++i) {
    std::string input = corpus[rng() % corpus.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !input.empty(); ++k) {
      const size_t at = rng() % input.size();
      switch (rng() % 4) {
        case 0: input[at] = static_cast<char>(rng()); break;                    // flip a byte
        case 1: input.erase(at, 1 + rng() % 8); break;                          // cut
        case 2: input.insert(at, std::string(1 + rng() % 4, static_cast<char>(rng()))); break;
        default: input.resize(at); break;                                        // truncate
      }
    }
    Replay(input);
  }
}

}  // namespace
}  // namespace rendezvous
}  // namespace dadt
