// dadtrun's own writes to its stdout/stderr, serialised with the output multiplexer's so that a
// line is never split by another writer.
//
//   console::Message("rank 1 (pid 42) exited with code 3");  // "dadtrun: ..." on stderr
#pragma once

#include <string>

namespace dadt {
namespace dadtrun {
namespace console {

// Writes all of `data` to `fd` under one process-wide lock (retrying short writes and EINTR).
// Returns false if the descriptor is gone (e.g. EPIPE); the caller just drops the output.
bool WriteAll(int fd, const std::string& data);

// "dadtrun: <text>\n" on stderr.
void Message(const std::string& text);

}  // namespace console
}  // namespace dadtrun
}  // namespace dadt
