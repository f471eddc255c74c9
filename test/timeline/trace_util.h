// Helpers for the timeline tests: read a live trace file the way the writer's header tells
// readers to (one snapshot under flock(LOCK_SH)), parse it, and make scratch paths.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dadt {
namespace timeline {
namespace testing {

// A scratch file path under $TEST_TMPDIR (or /tmp), unique per call.
std::string TempPath(const std::string& stem);

// The whole file as one snapshot; with `lock`, under flock(LOCK_SH) so that no commit of a
// running writer is half-seen. Returns "" when the file cannot be opened.
std::string ReadTrace(const std::string& path, bool lock = true);

// Parses `text`; on failure returns a discarded value and sets *error.
nlohmann::json ParseTrace(const std::string& text, std::string* error);

// The entries of `doc` (an array) whose "ph" is `ph`.
nlohmann::json EntriesWithPhase(const nlohmann::json& doc, const std::string& ph);

}  // namespace testing
}  // namespace timeline
}  // namespace dadt
