#include "dadtrun/output_mux.h"

#include <cerrno>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include "dadtrun/console.h"
#include "runtime/common/logging.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {
namespace {

// A rank printing without newlines would otherwise grow `pending` without bound.
constexpr size_t kMaxLineBytes = 64 * 1024;
constexpr size_t kReadChunk = 64 * 1024;

Status MakeDirs(const std::string& path) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return InvalidArgument("cannot create directory '" + partial +
                             "': " + net::ErrnoText(errno));
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("'" + path + "' is not a directory");
  }
  return Status::OK();
}

void WriteRaw(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

StatusOr<std::unique_ptr<OutputMux>> OutputMux::Create(Options options, int num_ranks) {
  std::vector<int> files;
  if (!options.output_dir.empty()) {
    auto close_all = [&files] {
      for (int fd : files) ::close(fd);
    };
    for (int rank = 0; rank < num_ranks; ++rank) {
      const std::string dir = options.output_dir + "/rank." + std::to_string(rank);
      Status s = MakeDirs(dir);
      if (!s.ok()) {
        close_all();
        return InvalidArgument("--output-filename: " + s.message());
      }
      for (const char* name : {"stdout", "stderr"}) {
        const std::string path = dir + "/" + name;
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
          const int e = errno;
          close_all();
          return InvalidArgument("--output-filename: cannot open '" + path +
                                 "': " + net::ErrnoText(e));
        }
        files.push_back(fd);
      }
    }
  }
  std::unique_ptr<OutputMux> mux(new OutputMux(std::move(options), std::move(files)));
  if (::pipe2(mux->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return InternalError("pipe2: " + net::ErrnoText(errno));
  }
  return mux;
}

OutputMux::OutputMux(Options options, std::vector<int> file_fds)
    : options_(std::move(options)), file_fds_(std::move(file_fds)) {}

OutputMux::~OutputMux() {
  Stop();
  for (Stream& s : streams_) CloseStream(&s);  // never started
  for (int fd : file_fds_) ::close(fd);
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void OutputMux::AddRank(int rank, int stdout_fd, int stderr_fd, const std::string& label) {
  DADT_CHECK(!thread_.joinable()) << "AddRank after Start";
  for (int i = 0; i < 2; ++i) {
    Stream s;
    s.rank = rank;
    s.label = label;
    s.is_stderr = i == 1;
    s.fd = i == 0 ? stdout_fd : stderr_fd;
    // Non-blocking so that Stop() can drain what is buffered without waiting for writers.
    ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL, 0) | O_NONBLOCK);
    const size_t file_index = 2 * static_cast<size_t>(rank) + i;
    if (file_index < file_fds_.size()) s.file_fd = file_fds_[file_index];
    streams_.push_back(std::move(s));
  }
}

Status OutputMux::Start() {
  if (thread_.joinable()) return PreconditionFailed("OutputMux already started");
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

bool OutputMux::WaitDrained(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return drained_cv_.wait_for(lock, timeout, [this] { return drained_; });
}

void OutputMux::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  if (wake_[1] >= 0) {
    char c = 1;
    ssize_t ignored = ::write(wake_[1], &c, 1);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
}

void OutputMux::Loop() {
  std::vector<pollfd> fds;
  std::vector<Stream*> polled;
  for (;;) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    for (Stream& s : streams_) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, POLLIN, 0});
      polled.push_back(&s);
    }
    if (polled.empty()) break;  // every stream at EOF
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      DADT_LOG(ERROR) << "output multiplexer: poll: " << net::ErrnoText(errno);
      break;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      if (!ReadSome(polled[i])) CloseStream(polled[i]);
    }
  }
  // Final pass (Stop() or error): take what the pipes still hold, without waiting for writers.
  for (Stream& s : streams_) {
    while (s.fd >= 0 && ReadSome(&s)) {
    }
    CloseStream(&s);
  }
  std::lock_guard<std::mutex> lock(mu_);
  drained_ = true;
  drained_cv_.notify_all();
}

bool OutputMux::ReadSome(Stream* s) {
  char buf[kReadChunk];
  ssize_t n = ::read(s->fd, buf, sizeof(buf));
  if (n < 0) return errno == EINTR;  // EAGAIN: nothing more for now (only in the final pass)
  if (n == 0) return false;
  if (s->file_fd >= 0) WriteRaw(s->file_fd, buf, static_cast<size_t>(n));
  s->pending.append(buf, static_cast<size_t>(n));
  EmitLines(s, /*flush_partial=*/false);
  return true;
}

void OutputMux::EmitLines(Stream* s, bool flush_partial) {
  const std::string prefix =
      "[" + (s->label.empty() ? std::to_string(s->rank) : s->label) + (s->is_stderr ? "]<stderr>:" : "]<stdout>:");
  std::string out;
  size_t start = 0;
  for (;;) {
    size_t nl = s->pending.find('\n', start);
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(s->pending, start, nl + 1 - start);
    start = nl + 1;
  }
  s->pending.erase(0, start);
  if (!s->pending.empty() && (flush_partial || s->pending.size() >= kMaxLineBytes)) {
    out += prefix + s->pending + "\n";
    s->pending.clear();
  }
  if (!out.empty()) console::WriteAll(s->is_stderr ? options_.stderr_fd : options_.stdout_fd, out);
}

void OutputMux::CloseStream(Stream* s) {
  if (s->fd < 0) return;
  EmitLines(s, /*flush_partial=*/true);
  ::close(s->fd);
  s->fd = -1;
}

}  // namespace dadtrun
}  // namespace dadt
