#include "timeline/internal/array_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace dadt {
namespace timeline {
namespace internal {
namespace {

Status ErrnoStatus(const std::string& what, const std::string& path) {
  return Aborted("cannot " + what + " timeline file '" + path + "': " + std::strerror(errno));
}

bool PwriteAll(int fd, const char* data, size_t n, int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = pwrite(fd, data + done, n - done, offset + static_cast<int64_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// Copies src[0, n) to dst[0, n): in the kernel when it can, else through a buffer.
bool CopyPrefix(int src, int dst, int64_t n) {
  loff_t in = 0, out = 0;
  while (in < n) {
    const ssize_t c = copy_file_range(src, &in, dst, &out, static_cast<size_t>(n - in), 0);
    if (c > 0) continue;
    if (c < 0 && errno == EINTR) continue;
    break;  // EXDEV, ENOSYS, EINVAL...: finish below
  }
  std::vector<char> buf(1 << 20);
  while (in < n) {
    const ssize_t r = pread(src, buf.data(), std::min<int64_t>(buf.size(), n - in), in);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || !PwriteAll(dst, buf.data(), static_cast<size_t>(r), in)) return false;
    in += r;
  }
  return true;
}

bool WriteSpaces(int fd, int64_t offset, int64_t n) {
  static const std::string kSpaces(64 * 1024, ' ');
  for (int64_t done = 0; done < n;) {
    const size_t step = static_cast<size_t>(std::min<int64_t>(kSpaces.size(), n - done));
    if (!PwriteAll(fd, kSpaces.data(), step, offset + done)) return false;
    done += static_cast<int64_t>(step);
  }
  return true;
}

}  // namespace

ArrayFile::ArrayFile(int64_t min_padding)
    : min_padding_(std::max<int64_t>(min_padding, 1)), page_(sysconf(_SC_PAGESIZE)) {}

ArrayFile::~ArrayFile() {
  if (fd_ >= 0) close(fd_);
}

Status ArrayFile::Create(const std::string& path) {
  if (fd_ >= 0) return PreconditionFailed("timeline file '" + path_ + "' is still open");
  path_ = path;
  error_ = Status::OK();
  chunk_.clear();
  write_pos_ = 0;  // Rewrite copies nothing and starts the document itself
  Status s = Rewrite(min_padding_, "]\n");
  if (s.ok()) flock(fd_, LOCK_UN);
  return s;
}

Status ArrayFile::Rewrite(int64_t padding, std::string_view tail) {
  std::vector<char> tmp(path_.begin(), path_.end());
  for (char c : std::string_view(".tmp.XXXXXX")) tmp.push_back(c);
  tmp.push_back('\0');
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("create", path_);
  int64_t end = write_pos_;
  bool ok = fchmod(fd, 0644) == 0;
  if (fd_ >= 0) {
    ok = ok && CopyPrefix(fd_, fd, write_pos_);
  } else {
    ok = ok && PwriteAll(fd, "[", 1, 0);  // a new document
    end = 1;
  }
  // The closing bracket goes to a page boundary, so the last page of padding is whole.
  int64_t closer = end + padding;
  if (padding > 0) closer = (closer + page_ - 1) / page_ * page_;
  ok = ok && WriteSpaces(fd, end, closer - end) && PwriteAll(fd, tail.data(), tail.size(), closer);
  // Lock the new file before it is visible, so a reader never sees it mid-Append; the lock is
  // still held on return (Append releases it, Create too, Close by closing).
  ok = ok && flock(fd, LOCK_EX) == 0 && rename(tmp.data(), path_.c_str()) == 0;
  if (!ok) {
    Status s = ErrnoStatus("write", path_);
    close(fd);
    unlink(tmp.data());
    return s;
  }
  if (fd_ >= 0) close(fd_);  // also drops its lock
  fd_ = fd;
  write_pos_ = end;
  closer_pos_ = closer;
  return Status::OK();  // still holding LOCK_EX on the new file
}

Status ArrayFile::Append(std::string_view data, const std::vector<size_t>& ends) {
  if (fd_ < 0) return PreconditionFailed("timeline file is not open");
  if (!error_.ok()) return error_;
  flock(fd_, LOCK_EX);
  size_t begin = 0;
  for (size_t end : ends) {
    AddEntry(data.substr(begin, end - begin));
    begin = end;
  }
  if (error_.ok()) error_ = FlushChunk();
  flock(fd_, LOCK_UN);
  return error_;
}

void ArrayFile::AddEntry(std::string_view entry) {
  if (!error_.ok() || entry.empty()) return;
  const int64_t len = static_cast<int64_t>(entry.size());
  const auto page_of = [&](int64_t offset) { return offset / page_; };
  if (!chunk_.empty()) {
    const int64_t at = chunk_pos_ + static_cast<int64_t>(chunk_.size());
    if (page_of(at + len - 1) == page_of(chunk_pos_) && at + len <= closer_pos_) {
      chunk_.append(entry);
      return;
    }
    if (!(error_ = FlushChunk()).ok()) return;
  }
  // A new chunk: here when the entry fits in the rest of this page, else at the next page.
  const auto place = [&] {
    const int64_t at = write_pos_;
    if (len <= page_ && page_of(at) != page_of(at + len - 1)) return (page_of(at) + 1) * page_;
    return at;
  };
  int64_t at = place();
  if (at + len > closer_pos_) {
    // Out of padding: double (at least), in a new file renamed over this one. The new file is
    // locked before it becomes visible, so this Append stays atomic for readers.
    error_ = Rewrite(std::max(min_padding_, write_pos_) + len + page_, "]\n");
    if (!error_.ok()) return;
    at = place();
  }
  chunk_pos_ = at;
  chunk_.assign(entry.data(), entry.size());
}

Status ArrayFile::FlushChunk() {
  if (chunk_.empty()) return Status::OK();
  if (!PwriteAll(fd_, chunk_.data(), chunk_.size(), chunk_pos_)) return ErrnoStatus("write", path_);
  write_pos_ = chunk_pos_ + static_cast<int64_t>(chunk_.size());
  chunk_.clear();
  return Status::OK();
}

Status ArrayFile::Close() {
  if (fd_ < 0) return error_;
  if (error_.ok()) error_ = FlushChunk();
  if (error_.ok()) error_ = Rewrite(0, "\n]\n");
  close(fd_);
  fd_ = -1;
  return error_;
}

}  // namespace internal
}  // namespace timeline
}  // namespace dadt
