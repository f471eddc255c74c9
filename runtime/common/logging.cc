#include "runtime/common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "runtime/common/env.h"

namespace dadt {
namespace {

// Read once; logging never changes the process state beyond this and the rank.
LogLevel ReadLevel() {
  const std::string v = env::GetString(env::kLogLevel);  // or HOROVOD_LOG_LEVEL (env.h)
  LogLevel level = LogLevel::kWarning;
  if (!v.empty()) ParseLogLevel(v, &level);
  return level;
}

std::atomic<int>& LogRank() {
  static std::atomic<int> rank{-1};
  return rank;
}

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kFatal: return "fatal";
  }
  return "?";
}

}  // namespace

bool ParseLogLevel(const std::string& s, LogLevel* out) {
  static const struct { const char* name; LogLevel level; } kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug},   {"info", LogLevel::kInfo},
      {"warning", LogLevel::kWarning}, {"warn", LogLevel::kWarning}, {"error", LogLevel::kError},
      {"fatal", LogLevel::kFatal}};
  for (const auto& n : kNames) {
    if (strcasecmp(s.c_str(), n.name) == 0) {
      *out = n.level;
      return true;
    }
  }
  return false;
}

LogLevel MinLogLevel() {
  static const LogLevel level = ReadLevel();
  return level;
}

void SetLogRank(int rank) { LogRank().store(rank); }

namespace internal {

LogMessage::LogMessage(const char* file, int line, LogLevel level)
    : file_(file), line_(line), level_(level) {}

LogMessage::~LogMessage() {
  const char* base = std::strrchr(file_, '/');
  base = base ? base + 1 : file_;
  std::string line = "[dadt " + std::string(LevelName(level_));
  int rank = LogRank().load();
  if (rank >= 0) line += " rank " + std::to_string(rank);
  line += "] " + std::string(base) + ":" + std::to_string(line_) + " " + stream_.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (level_ == LogLevel::kFatal) {
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace internal
}  // namespace dadt
