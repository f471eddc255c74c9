// ArrayFile: a file holding one JSON array that is a valid document at every moment while
// entries are appended to it, even when the process is killed by SIGKILL in the middle of a write.
//
//   ArrayFile f;
//   Status s = f.Create("/tmp/t.json");         // the file is "[" + padding + "]\n" at once
//   s = f.Append(entries, entry_ends);           // entries: "\n{...}" then ",\n{...}" each
//   s = f.Close();                               // compacts to "[" + entries + "\n]\n"
//
// Why not overwrite a trailing "]" with "<entries>]" in one pwrite() per batch: Linux checks for a
// fatal signal between the pages (folios) of a single write(), so SIGKILL can cut a multi-page
// pwrite() at a page boundary and leave an unclosed document (on the development VM, 20 of 20
// kills during a 256 MiB pwrite() on ext4 left a page-aligned prefix), and a concurrent read()
// can see the same page-aligned prefix. A write that stays inside one page is done in one step.
// Hence this layout, "[" + entries + padding + "]\n", where the padding is spaces:
//  1. Entries are written into the padding, before the closing bracket, which never moves: one
//     pwrite() per page, never across a page boundary. An entry that does not fit in the rest of
//     a page starts at the next one; the gap stays spaces, which JSON allows between tokens.
//  2. When the padding runs out, the document is copied to a temporary file in the same folder
//     with new padding as large as its content, and renamed over the path (rename() is atomic).
//     Doubling keeps the copying at O(1) amortized per byte.
//  3. Close() compacts the same way, so a finished file has no padding.
// An entry longer than a page (kMaxEntryBytes) cannot be written in one step; the formatter caps
// names and args so that this never happens, and ArrayFile still writes one if asked.
// Readers of a live file get a consistent snapshot by taking flock(LOCK_SH): each Append holds
// flock(LOCK_EX). Without it a read that races a page write can see that page half-copied.
// A killed process may leave a temporary "<path>.tmp.XXXXXX" behind if it dies while growing.
// Not thread-safe: owned by the writer thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace timeline {
namespace internal {

class ArrayFile {
 public:
  // The largest entry (separator included) that is always written in one step.
  static constexpr size_t kMaxEntryBytes = 4096;

  // `min_padding` is the padding of a new file and the least added when it grows.
  explicit ArrayFile(int64_t min_padding = 256 * 1024);
  ~ArrayFile();  // closes without compacting (the file stays valid)
  ArrayFile(const ArrayFile&) = delete;
  ArrayFile& operator=(const ArrayFile&) = delete;

  // Creates or replaces `path` with an empty, padded document.
  Status Create(const std::string& path);
  // Appends the entries data[ends[i-1], ends[i]) in order; each must carry its own separator.
  Status Append(std::string_view data, const std::vector<size_t>& ends);
  // Compacts the document (no padding) and closes the file. Idempotent.
  Status Close();

  bool is_open() const { return fd_ >= 0; }
  int64_t content_bytes() const { return write_pos_; }  // "[" + entries, gaps included
  int64_t page_size() const { return page_; }

 private:
  void AddEntry(std::string_view entry);
  Status FlushChunk();
  // Copies [0, write_pos_) to a new file followed by `padding` spaces (rounded up to a page) and
  // `tail`, renames it over path_ and continues in it, holding flock(LOCK_EX) on it.
  Status Rewrite(int64_t padding, std::string_view tail);

  const int64_t min_padding_;
  const int64_t page_;
  std::string path_;
  int fd_ = -1;
  int64_t write_pos_ = 0;   // end of the last entry written
  int64_t closer_pos_ = 0;  // offset of the closing "]"
  std::string chunk_;       // entries waiting to be written at chunk_pos_, all in one page
  int64_t chunk_pos_ = 0;
  Status error_;
};

}  // namespace internal
}  // namespace timeline
}  // namespace dadt
