// ChromeFormatter: turns Events into Chrome trace-event JSON entries (the "JSON Array Format" read
// by chrome://tracing and Perfetto), one row per tensor as Horovod's timeline does.
//
//   ChromeFormatter f;
//   std::string body;
//   f.Append({ts, Phase::kBegin, "grad.w", "QUEUE", ""}, &body);
//   file = ChromeFormatter::kOpen + body + ChromeFormatter::kClose;   // a complete document
//
// Rows: each tensor gets its own pid (and tid = pid), assigned on first sight starting at 1, and
// three metadata entries the first time it is seen: process_name and thread_name carrying the
// tensor name, and process_sort_index = the pid, so rows are ordered by first appearance. Events
// with an empty tensor use row 0, named "dadt"; instants there are global marks ("s":"g", e.g.
// CYCLE_START), instants on a tensor row are thread-scoped ("s":"t").
// Entries: {"ph":"B|E|i","name":activity,"ts":us,"pid":row,"tid":row[,"s":..][,"args":{..}]}.
// args must be one JSON object; anything else is kept as {"invalid_args":"<text>"} so that the
// document stays valid whatever the emitter passed.
// Size: names, activities and args longer than the kMax*Bytes below are cut (ending in "...";
// oversized args become {"truncated_args":"<start>..."}), which keeps every entry under
// ArrayFile::kMaxEntryBytes, so each is written to disk in one step (array_file.h).
// Not thread-safe: owned by the writer thread.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "timeline/event.h"

namespace dadt {
namespace timeline {
namespace internal {

class ChromeFormatter {
 public:
  // A document is kOpen + the appended entries + kClose.
  static constexpr char kOpen[] = "[";
  static constexpr char kClose[] = "\n]\n";

  static constexpr size_t kMaxNameBytes = 512;
  static constexpr size_t kMaxActivityBytes = 128;
  static constexpr size_t kMaxArgsBytes = 2048;

  // Appends the entries for `event` (row metadata first when its row is new), each preceded by
  // the separator it needs in the document ("\n" for the first entry, ",\n" afterwards). With
  // `entry_ends`, the offset in *out just past each entry is pushed onto it.
  void Append(const Event& event, std::string* out, std::vector<size_t>* entry_ends = nullptr);
  // Forgets the rows and the separator state (a new document).
  void Reset();
  size_t rows() const { return rows_.size(); }

 private:
  int RowFor(const std::string& tensor, std::string* out, std::vector<size_t>* entry_ends);
  void BeginEntry(std::string* out);

  std::unordered_map<std::string, int> rows_;
  int next_row_ = 1;
  bool first_entry_ = true;
};

}  // namespace internal
}  // namespace timeline
}  // namespace dadt
