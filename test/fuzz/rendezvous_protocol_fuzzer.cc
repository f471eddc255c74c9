// libFuzzer entry point for the rendezvous protocol parser (see rendezvous_protocol_fuzz.h).
//   tools/run_fuzz.sh 60     # builds with clang -fsanitize=fuzzer,address,undefined and runs 60 s
#include <cstddef>
#include <cstdint>

#include "test/fuzz/rendezvous_protocol_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dadt::rendezvous::FuzzOneInput(data, size);
  return 0;
}
