// Logging and always-on invariant checks.
//
//   DADT_LOG(INFO) << "fused " << n << " tensors";
//   DADT_CHECK_EQ(a.size(), b.size());   // aborts with both values and file:line
//
// Lines go to stderr as "[dadt <level> rank R] file:line message". The level comes from
// DADT_LOG_LEVEL or Horovod's HOROVOD_LOG_LEVEL (trace, debug, info, warning, error; default
// warning). The rank prefix is set once by the runtime with SetLogRank; it is the only
// process-wide logging setting.
#pragma once

#include <sstream>
#include <string>

namespace dadt {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

LogLevel MinLogLevel();
void SetLogRank(int rank);
bool ParseLogLevel(const std::string& s, LogLevel* out);

namespace internal {
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level);
  ~LogMessage();
  std::ostringstream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace dadt

#define DADT_LOG_LEVEL_TRACE ::dadt::LogLevel::kTrace
#define DADT_LOG_LEVEL_DEBUG ::dadt::LogLevel::kDebug
#define DADT_LOG_LEVEL_INFO ::dadt::LogLevel::kInfo
#define DADT_LOG_LEVEL_WARNING ::dadt::LogLevel::kWarning
#define DADT_LOG_LEVEL_ERROR ::dadt::LogLevel::kError
#define DADT_LOG_LEVEL_FATAL ::dadt::LogLevel::kFatal

#define DADT_LOG(level)                                        \
  if (DADT_LOG_LEVEL_##level < ::dadt::MinLogLevel()) {        \
  } else                                                       \
    ::dadt::internal::LogMessage(__FILE__, __LINE__, DADT_LOG_LEVEL_##level).stream()

#define DADT_CHECK(cond)                                                              \
  if (cond) {                                                                         \
  } else                                                                              \
    ::dadt::internal::LogMessage(__FILE__, __LINE__, ::dadt::LogLevel::kFatal).stream() \
        << "Check failed: " #cond " "

#define DADT_CHECK_OP(a, b, op)                                                        \
  if ((a)op(b)) {                                                                      \
  } else                                                                               \
    ::dadt::internal::LogMessage(__FILE__, __LINE__, ::dadt::LogLevel::kFatal).stream() \
        << "Check failed: " #a " " #op " " #b " (" << (a) << " vs " << (b) << ") "

#define DADT_CHECK_EQ(a, b) DADT_CHECK_OP(a, b, ==)
#define DADT_CHECK_NE(a, b) DADT_CHECK_OP(a, b, !=)
#define DADT_CHECK_LT(a, b) DADT_CHECK_OP(a, b, <)
#define DADT_CHECK_LE(a, b) DADT_CHECK_OP(a, b, <=)
#define DADT_CHECK_GE(a, b) DADT_CHECK_OP(a, b, >=)

#ifdef NDEBUG
#define DADT_DCHECK(cond) \
  while (false) DADT_CHECK(cond)
#else
#define DADT_DCHECK(cond) DADT_CHECK(cond)
#endif
