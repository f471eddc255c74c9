// ArrayFile: valid after every append, entries never straddle a page, growth by copy-and-rename,
// compaction on Close.
#include "timeline/internal/array_file.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test/timeline/trace_util.h"

namespace dadt {
namespace timeline {
namespace internal {
namespace {

using nlohmann::json;
using testing::ParseTrace;
using testing::ReadTrace;
using testing::TempPath;

// Entries {"i":N,"pad":"xxx"} with their separators, as the formatter produces them.
struct Batch {
  std::string data;
  std::vector<size_t> ends;
  void Add(int i, size_t pad, bool first) {
    data += first ? "\n" : ",\n";
    data += "{\"i\":" + std::to_string(i) + ",\"pad\":\"" + std::string(pad, 'x') + "\"}";
    ends.push_back(data.size());
  }
};

json Parse(const std::string& path) {
  std::string error;
  json doc = ParseTrace(ReadTrace(path), &error);
  EXPECT_FALSE(doc.is_discarded()) << error;
  return doc;
}

TEST(ArrayFileTest, NewFileIsAValidPaddedDocument) {
  const std::string path = TempPath("array_new");
  ArrayFile f(10000);
  ASSERT_TRUE(f.Create(path).ok());
  const std::string text = ReadTrace(path);
  EXPECT_GE(text.size(), 10000u);
  EXPECT_EQ(text.substr(text.size() - 2), "]\n");
  EXPECT_EQ(text.find_first_not_of(' ', 1), text.size() - 2);  // "[" + spaces + "]\n"
  EXPECT_TRUE(Parse(path).empty());
  EXPECT_EQ(f.Create(path).code(), StatusCode::kPreconditionFailed);
  ASSERT_TRUE(f.Close().ok());
  EXPECT_EQ(ReadTrace(path), "[\n]\n");
}

TEST(ArrayFileTest, ErrorsNameThePath) {
  ArrayFile f;
  EXPECT_EQ(f.Append("x", {1}).code(), StatusCode::kPreconditionFailed);
  Status s = f.Create("/nonexistent-dir/t.json");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/t.json"), std::string::npos);
}

TEST(ArrayFileTest, ValidAfterEveryAppendAndEntriesNeverStraddleAPage) {
  const std::string path = TempPath("array_pages");
  ArrayFile f(/*min_padding=*/4096);  // small, so the file grows many times
  ASSERT_TRUE(f.Create(path).ok());
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> pad(0, 3000);
  int next = 0;
  for (int round = 0; round < 60; ++round) {
    Batch b;
    const int n = 1 + round % 9;
    for (int k = 0; k < n; ++k, ++next) b.Add(next, pad(rng), next == 0);
    ASSERT_TRUE(f.Append(b.data, b.ends).ok());
    const json doc = Parse(path);
    ASSERT_EQ(doc.size(), static_cast<size_t>(next));

    const std::string text = ReadTrace(path);
    const int64_t page = f.page_size();
    const std::string key = "{\"i\":";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
      const size_t end = text.find('}', at);
      ASSERT_EQ(static_cast<int64_t>(at) / page, static_cast<int64_t>(end) / page)
          << "entry at " << at << " straddles a page";
    }
  }
  ASSERT_TRUE(f.Close().ok());
  const std::string text = ReadTrace(path);
  EXPECT_EQ(text.substr(text.size() - 4), "}\n]\n");  // compacted: no padding left
  const json doc = Parse(path);
  ASSERT_EQ(doc.size(), static_cast<size_t>(next));
  for (int i = 0; i < next; ++i) EXPECT_EQ(doc[i]["i"], i);
}

TEST(ArrayFileTest, EntryLargerThanAPageIsStillWritten) {
  const std::string path = TempPath("array_big");
  ArrayFile f(4096);
  ASSERT_TRUE(f.Create(path).ok());
  Batch b;
  b.Add(0, 10, true);
  b.Add(1, 3 * ArrayFile::kMaxEntryBytes, false);
  b.Add(2, 10, false);
  ASSERT_TRUE(f.Append(b.data, b.ends).ok());
  EXPECT_EQ(Parse(path).size(), 3u);
  ASSERT_TRUE(f.Close().ok());
  EXPECT_EQ(Parse(path)[1]["pad"].get<std::string>().size(), 3 * ArrayFile::kMaxEntryBytes);
}

}  // namespace
}  // namespace internal
}  // namespace timeline
}  // namespace dadt
