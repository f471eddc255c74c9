// OutputMux: one thread that reads every rank's stdout and stderr pipes and prints each line with
// Horovod's prefix, "[<rank>]<stdout>:line" on dadtrun's stdout and "[<rank>]<stderr>:line" on its
// stderr.
//
// Lines are written whole (through console::WriteAll's lock), so output of different ranks never
// interleaves within a line; a last line without '\n' is completed at EOF. With an output directory
// the raw bytes of each stream are also written to DIR/rank.<N>/stdout and DIR/rank.<N>/stderr.
//
// Lifetime: Create, AddRank for each rank, Start; WaitDrained until every pipe reached EOF; Stop.
// AddRank is not allowed after Start (the thread owns the streams from then on).
//
//   auto mux = OutputMux::Create({}, /*num_ranks=*/2);
//   (*mux)->AddRank(0, r0.stdout_fd, r0.stderr_fd); ...; (*mux)->Start();
//   (*mux)->WaitDrained(std::chrono::seconds(1)); (*mux)->Stop();
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

class OutputMux {
 public:
  struct Options {
    int stdout_fd = STDOUT_FILENO;  // where prefixed lines go
    int stderr_fd = STDERR_FILENO;
    std::string output_dir;  // non-empty: also DIR/rank.<N>/{stdout,stderr}
  };

  // Creates the per-rank output files (and their directories) up front, so a bad directory is
  // reported before any rank starts.
  static StatusOr<std::unique_ptr<OutputMux>> Create(Options options, int num_ranks);
  ~OutputMux();
  OutputMux(const OutputMux&) = delete;
  OutputMux& operator=(const OutputMux&) = delete;

  // Takes ownership of the read ends of `rank`'s pipes. A non-empty `label` stands in the prefix
  // instead of the rank ("[h1/0/3]<stdout>:" for an elastic worker, whose rank changes).
  void AddRank(int rank, int stdout_fd, int stderr_fd, const std::string& label = "");
  Status Start();
  // True once every stream reached EOF and its output was written; false on timeout.
  bool WaitDrained(std::chrono::milliseconds timeout);
  // Reads whatever is still buffered in the pipes, completes partial lines, closes everything and
  // joins the thread. Idempotent.
  void Stop();

 private:
  struct Stream {
    int rank = 0;
    std::string label;  // in the prefix instead of the rank, when set
    bool is_stderr = false;
    int fd = -1;       // pipe read end; -1 at EOF
    int file_fd = -1;  // raw copy in the output directory, or -1
    std::string pending;  // bytes after the last '\n'
  };

  OutputMux(Options options, std::vector<int> file_fds);
  void Loop();
  // Reads what is available now; returns false at EOF or error (stream closed).
  bool ReadSome(Stream* s);
  void EmitLines(Stream* s, bool flush_partial);
  void CloseStream(Stream* s);

  const Options options_;
  std::vector<int> file_fds_;  // [2*rank] stdout, [2*rank+1] stderr
  std::vector<Stream> streams_;
  int wake_[2] = {-1, -1};
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable drained_cv_;
  bool drained_ = false;
  bool stop_ = false;
};

}  // namespace dadtrun
}  // namespace dadt
