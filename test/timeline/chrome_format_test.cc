// ChromeFormatter: rows per tensor with Horovod-style metadata, B/E/i entries, awkward names and
// bad args, always producing a document that nlohmann::json accepts.
#include "timeline/internal/chrome_format.h"

#include "timeline/internal/array_file.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dadt {
namespace timeline {
namespace internal {
namespace {

using nlohmann::json;

json Document(const std::vector<Event>& events, ChromeFormatter* f) {
  std::string body;
  for (const Event& e : events) f->Append(e, &body);
  return json::parse(std::string(ChromeFormatter::kOpen) + body + ChromeFormatter::kClose);
}

// The metadata entry `name` for row `pid`, or null.
json Meta(const json& doc, const std::string& name, int pid) {
  for (const auto& e : doc) {
    if (e["ph"] == "M" && e["name"] == name && e["pid"] == pid) return e;
  }
  return nullptr;
}

TEST(ChromeFormatTest, EmptyDocumentIsAnEmptyArray) {
  const json doc = json::parse(std::string(ChromeFormatter::kOpen) + ChromeFormatter::kClose);
  EXPECT_TRUE(doc.is_array());
  EXPECT_TRUE(doc.empty());
}

TEST(ChromeFormatTest, OneRowPerTensorInOrderOfFirstAppearance) {
  ChromeFormatter f;
  const json doc = Document({{10, Phase::kBegin, "b", "NEGOTIATE_ALLREDUCE", ""},
                             {11, Phase::kBegin, "a", "QUEUE", ""},
                             {12, Phase::kEnd, "a", "QUEUE", ""},
                             {13, Phase::kEnd, "b", "NEGOTIATE_ALLREDUCE", ""}},
                            &f);
  EXPECT_EQ(f.rows(), 2u);
  EXPECT_EQ(Meta(doc, "process_name", 1)["args"]["name"], "b");
  EXPECT_EQ(Meta(doc, "thread_name", 1)["args"]["name"], "b");
  EXPECT_EQ(Meta(doc, "process_sort_index", 1)["args"]["sort_index"], 1);
  EXPECT_EQ(Meta(doc, "process_name", 2)["args"]["name"], "a");
  EXPECT_EQ(Meta(doc, "process_sort_index", 2)["args"]["sort_index"], 2);

  std::vector<json> events;
  for (const auto& e : doc) {
    if (e["ph"] != "M") events.push_back(e);
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0],
            json::parse(R"({"ph":"B","name":"NEGOTIATE_ALLREDUCE","ts":10,"pid":1,"tid":1})"));
  EXPECT_EQ(events[1], json::parse(R"({"ph":"B","name":"QUEUE","ts":11,"pid":2,"tid":2})"));
  EXPECT_EQ(events[2]["ph"], "E");
  EXPECT_EQ(events[2]["pid"], 2);
  EXPECT_EQ(events[3]["ts"], 13);
}

TEST(ChromeFormatTest, InstantsAndArgs) {
  ChromeFormatter f;
  const json doc = Document({{5, Phase::kInstant, "", kCycleStart, ""},
                             {6, Phase::kInstant, "w", "1", ReadyRankArgs(1)},
                             {7, Phase::kEnd, "w", "ALLREDUCE", TensorArgs("float32", {2, 3})}},
                            &f);
  json cycle, ready, end;
  for (const auto& e : doc) {
    if (e["ph"] == "i" && e["name"] == "CYCLE_START") cycle = e;
    if (e["ph"] == "i" && e["name"] == "1") ready = e;
    if (e["ph"] == "E") end = e;
  }
  EXPECT_EQ(cycle["s"], "g");
  EXPECT_EQ(cycle["pid"], 0);
  EXPECT_EQ(Meta(doc, "process_name", 0)["args"]["name"], "dadt");
  EXPECT_EQ(ready["s"], "t");
  EXPECT_EQ(ready["pid"], 1);
  EXPECT_EQ(ready["args"]["ready_rank"], 1);
  EXPECT_EQ(end["args"]["dtype"], "float32");
  EXPECT_EQ(end["args"]["shape"], json::parse("[2,3]"));
}

TEST(ChromeFormatTest, MalformedArgsAreKeptAsText) {
  ChromeFormatter f;
  const json doc = Document({{1, Phase::kEnd, "t", "ALLREDUCE", "{\"dtype\":"},
                             {2, Phase::kEnd, "t", "ALLREDUCE", "not json \"at all\""}},
                            &f);
  std::vector<std::string> kept;
  for (const auto& e : doc) {
    if (e["ph"] == "E") kept.push_back(e["args"]["invalid_args"]);
  }
  EXPECT_EQ(kept, (std::vector<std::string>{"{\"dtype\":", "not json \"at all\""}));
}

TEST(ChromeFormatTest, AwkwardTensorNamesRoundTrip) {
  const std::vector<std::string> names = {
      "quote\"d",  "back\\slash", "new\nline",        "tab\there", std::string("nul\0x", 5),
      "\x01\x1f",  "[],{}:",      "gr\xc3\xa4" "d.\xe6\xa2\xaf\xe5\xba\xa6", std::string(500, 'x'),
      "</script>", "\\u0041",
  };
  ChromeFormatter f;
  std::vector<Event> events;
  for (const auto& n : names) {
    events.push_back({1, Phase::kBegin, n, n, ""});  // the name as activity too
    events.push_back({2, Phase::kEnd, n, n, ""});
  }
  const json doc = Document(events, &f);
  ASSERT_EQ(f.rows(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(Meta(doc, "process_name", static_cast<int>(i + 1))["args"]["name"], names[i]);
  }
}

TEST(ChromeFormatTest, InvalidUtf8NamesStillParse) {
  ChromeFormatter f;
  const json doc = Document({{1, Phase::kBegin, "bad\xff\xfe", "X\xc3", ""}}, &f);
  EXPECT_EQ(Meta(doc, "process_name", 1)["args"]["name"], "bad\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(ChromeFormatTest, EveryEntryFitsInOnePageWrite) {
  const std::string worst_name(10000, '\x01');  // escapes to \u0001: six bytes each
  const std::string worst_args = "{\"a\":\"" + std::string(10000, 'x') + "\"}";
  ChromeFormatter f;
  std::string body;
  std::vector<size_t> ends;
  f.Append({-9223372036854775807LL, Phase::kInstant, worst_name, worst_name, worst_args}, &body,
           &ends);
  f.Append({1, Phase::kEnd, "t", "A", std::string(5000, '\n')}, &body, &ends);  // invalid args
  ASSERT_EQ(ends.size(), 8u);  // per event: its row's 3 metadata entries, then the event
  size_t begin = 0;
  for (size_t end : ends) {
    EXPECT_LE(end - begin, ArrayFile::kMaxEntryBytes);
    begin = end;
  }
  EXPECT_EQ(begin, body.size());
  const json doc =
      json::parse(std::string(ChromeFormatter::kOpen) + body + ChromeFormatter::kClose);
  const std::string name = Meta(doc, "process_name", 1)["args"]["name"];
  EXPECT_EQ(name.size(), ChromeFormatter::kMaxNameBytes);
  EXPECT_EQ(name.substr(name.size() - 3), "...");
  EXPECT_TRUE(doc[3]["args"].contains("truncated_args"));
}

TEST(ChromeFormatTest, CutsNeverSplitAUtf8Sequence) {
  std::string name;
  while (name.size() < 2000) name += "\xe6\xa2\xaf";  // 梯, three bytes
  ChromeFormatter f;
  const json doc = Document({{1, Phase::kBegin, name, "A", ""}}, &f);
  const std::string kept = Meta(doc, "process_name", 1)["args"]["name"];
  EXPECT_EQ(kept.find("\xef\xbf\xbd"), std::string::npos);  // no U+FFFD from a cut sequence
  EXPECT_LE(kept.size(), ChromeFormatter::kMaxNameBytes);
}

TEST(ChromeFormatTest, ResetStartsANewDocument) {
  ChromeFormatter f;
  Document({{1, Phase::kBegin, "a", "Q", ""}}, &f);
  f.Reset();
  const json doc = Document({{1, Phase::kBegin, "z", "Q", ""}}, &f);
  EXPECT_EQ(Meta(doc, "process_name", 1)["args"]["name"], "z");
}

}  // namespace
}  // namespace internal
}  // namespace timeline
}  // namespace dadt
