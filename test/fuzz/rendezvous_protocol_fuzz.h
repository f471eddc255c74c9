// One fuzz input through the rendezvous protocol parser, as the server and the client see bytes.
//
// Shared by the libFuzzer target (rendezvous_protocol_fuzzer.cc, built with clang
// -fsanitize=fuzzer,address by tools/run_fuzz.sh) and the corpus replay test that Bazel runs, so
// the checked-in corpus is exercised on every build whether or not clang is installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dadt {
namespace rendezvous {

// Feeds `data` to the frame reassembler in chunks whose sizes come from the input, decodes every
// frame as a request and as a response, and checks the round trip (decode -> encode -> decode
// gives the same fields and the same bytes). A broken invariant aborts (a crash for the fuzzer).
void FuzzOneInput(const uint8_t* data, size_t size);

}  // namespace rendezvous
}  // namespace dadt
