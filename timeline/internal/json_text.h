// JSON text helpers for the timeline: a fast string escaper and a small validator.
//
// The timeline writes JSON by hand (no DOM, no allocation per field) because it runs beside the
// training loop. Two helpers keep the output valid whatever the runtime hands it:
//
//   std::string out = "{\"name\":";
//   internal::AppendJsonString(&out, tensor_name);   // quoted, escaped, valid UTF-8
//   if (!internal::IsJsonObject(args)) ...           // reject malformed args before writing them
//
// AppendJsonString escapes '"', '\\' and control characters (\n, \t, ... or \u00XX), passes valid
// UTF-8 through unchanged and replaces each byte of an invalid UTF-8 sequence with U+FFFD, so a
// name made of arbitrary bytes still yields a document that strict parsers accept.
// IsJsonObject accepts exactly one JSON object (RFC 8259, nesting depth <= 64, surrounding
// whitespace allowed). Both are pure functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace dadt {
namespace timeline {
namespace internal {

// Appends `s` to `out` as a quoted JSON string.
void AppendJsonString(std::string* out, std::string_view s);

// True when `s` is one well-formed JSON object ("{...}").
bool IsJsonObject(std::string_view s);

}  // namespace internal
}  // namespace timeline
}  // namespace dadt
