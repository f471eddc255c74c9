// The timeline's hand-rolled JSON escaper and validator, checked against nlohmann::json.
#include "timeline/internal/json_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace dadt {
namespace timeline {
namespace internal {
namespace {

std::string Quote(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

TEST(JsonTextTest, PlainTextIsOnlyQuoted) {
  EXPECT_EQ(Quote(""), "\"\"");
  EXPECT_EQ(Quote("grad.fc1.weight"), "\"grad.fc1.weight\"");
}

TEST(JsonTextTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(Quote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(Quote("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(Quote("\n\t\r\b\f"), "\"\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(Quote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(Quote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(Quote("\x7f"), "\"\x7f\"");  // DEL is allowed raw in JSON
}

TEST(JsonTextTest, ValidUtf8PassesThrough) {
  // "gräd/梯度/🔥": two-, three- and four-byte sequences.
  const std::string s = "gr\xc3\xa4" "d/\xe6\xa2\xaf\xe5\xba\xa6/\xf0\x9f\x94\xa5";
  EXPECT_EQ(Quote(s), "\"" + s + "\"");
  EXPECT_EQ(nlohmann::json::parse(Quote(s)).get<std::string>(), s);
}

TEST(JsonTextTest, InvalidUtf8BecomesReplacementCharacters) {
  const std::string cases[] = {
      "\xff", "\xc3", "a\x80z", "\xc0\xaf",  // stray, truncated, lone continuation, overlong
      "\xed\xa0\x80",                        // surrogate
      "\xf4\x90\x80\x80",                    // above U+10FFFF
      "\xe6\xa2",                            // truncated 3-byte sequence at the end
  };
  for (const std::string& s : cases) {
    const std::string q = Quote(s);
    EXPECT_NE(q.find("\\ufffd"), std::string::npos) << q;
    EXPECT_NO_THROW(nlohmann::json::parse(q)) << q;
  }
}

TEST(JsonTextTest, EveryByteValueRoundTripsToValidJson) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  const std::string q = Quote(all);
  const std::string back = nlohmann::json::parse(q).get<std::string>();
  EXPECT_EQ(back.substr(0, 128), all.substr(0, 128));  // ASCII survives exactly
}

TEST(JsonTextTest, IsJsonObjectAcceptsObjects) {
  for (const char* s : {"{}", " { } ", R"({"dtype":"float32","shape":[2,3]})",
                        R"({"ready_rank":1})",
                        R"({"a":{"b":[true,false,null,-1.5e-3,0,"\u00e9\n"]}})",
                        "{\"k\":\"\xe6\xa2\xaf\"}"}) {
    EXPECT_TRUE(IsJsonObject(s)) << s;
    EXPECT_NO_THROW(nlohmann::json::parse(s)) << s;
  }
}

TEST(JsonTextTest, IsJsonObjectRejectsEverythingElse) {
  for (const char* s : {"", "[]", "1", "\"x\"", "{", "{\"a\":1", "{\"a\":1,}", "{a:1}", "{\"a\" 1}",
                        "{\"a\":01}", "{\"a\":1.}", "{\"a\":tru}", "{\"a\":\"\n\"}", "{}{}",
                        "{\"a\":\"\\x\"}", "{\"a\":\"\xff\"}", "{\"a\":[1,]}", "{\"a\":-}"}) {
    EXPECT_FALSE(IsJsonObject(s)) << s;
  }
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "{\"a\":";
  deep += "1";
  for (int i = 0; i < 100; ++i) deep += "}";
  EXPECT_FALSE(IsJsonObject(deep));  // bounded recursion
}

}  // namespace
}  // namespace internal
}  // namespace timeline
}  // namespace dadt
