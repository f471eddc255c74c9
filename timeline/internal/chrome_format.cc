#include "timeline/internal/chrome_format.h"

#include <charconv>

#include "timeline/internal/json_text.h"

namespace dadt {
namespace timeline {
namespace internal {
namespace {

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, res.ptr - buf);
}

// ,"pid":N,"tid":N
void AppendRow(std::string* out, int row) {
  out->append(",\"pid\":");
  AppendInt(out, row);
  out->append(",\"tid\":");
  AppendInt(out, row);
}

// `s` cut to at most `max` bytes ending in "...", without splitting a UTF-8 sequence.
std::string_view Cut(std::string_view s, size_t max, std::string* storage) {
  if (s.size() <= max) return s;
  size_t n = max - 3;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  storage->assign(s.data(), n);
  storage->append("...");
  return *storage;
}

void EndEntry(const std::string& out, std::vector<size_t>* entry_ends) {
  if (entry_ends) entry_ends->push_back(out.size());
}

const char* PhaseCode(Phase p) {
  switch (p) {
    case Phase::kBegin: return "B";
    case Phase::kEnd: return "E";
    case Phase::kInstant: return "i";
  }
  return "i";
}

}  // namespace

void ChromeFormatter::Reset() {
  rows_.clear();
  next_row_ = 1;
  first_entry_ = true;
}

void ChromeFormatter::BeginEntry(std::string* out) {
  out->append(first_entry_ ? "\n" : ",\n");
  first_entry_ = false;
}

int ChromeFormatter::RowFor(const std::string& tensor, std::string* out,
                            std::vector<size_t>* entry_ends) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  const int row = tensor.empty() ? 0 : next_row_++;
  rows_.emplace(tensor, row);
  std::string cut;
  const std::string_view label =
      tensor.empty() ? std::string_view("dadt") : Cut(tensor, kMaxNameBytes, &cut);
  for (const char* meta : {"process_name", "thread_name"}) {
    BeginEntry(out);
    out->append("{\"ph\":\"M\",\"name\":\"");
    out->append(meta);
    out->push_back('"');
    AppendRow(out, row);
    out->append(",\"args\":{\"name\":");
    AppendJsonString(out, label);
    out->append("}}");
    EndEntry(*out, entry_ends);
  }
  BeginEntry(out);
  out->append("{\"ph\":\"M\",\"name\":\"process_sort_index\"");
  AppendRow(out, row);
  out->append(",\"args\":{\"sort_index\":");
  AppendInt(out, row);
  out->append("}}");
  EndEntry(*out, entry_ends);
  return row;
}

void ChromeFormatter::Append(const Event& e, std::string* out, std::vector<size_t>* entry_ends) {
  const int row = RowFor(e.tensor, out, entry_ends);
  std::string cut;
  BeginEntry(out);
  out->append("{\"ph\":\"");
  out->append(PhaseCode(e.phase));
  out->append("\",\"name\":");
  AppendJsonString(out, Cut(e.activity, kMaxActivityBytes, &cut));
  out->append(",\"ts\":");
  AppendInt(out, e.ts_us);
  AppendRow(out, row);
  if (e.phase == Phase::kInstant) out->append(row == 0 ? ",\"s\":\"g\"" : ",\"s\":\"t\"");
  if (!e.args.empty()) {
    out->append(",\"args\":");
    if (e.args.size() <= kMaxArgsBytes && IsJsonObject(e.args)) {
      out->append(e.args);
    } else {
      out->append(e.args.size() > kMaxArgsBytes ? "{\"truncated_args\":" : "{\"invalid_args\":");
      AppendJsonString(out, Cut(e.args, 256, &cut));
      out->push_back('}');
    }
  }
  out->push_back('}');
  EndEntry(*out, entry_ends);
}

}  // namespace internal
}  // namespace timeline
}  // namespace dadt
