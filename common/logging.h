// Minimal leveled logging to stderr (Debian's Abseil 20220623 predates absl/log).
//   PDS_LOG(INFO) << "admitted " << id;
//   PDS_LOG_EVERY_N_SEC(WARNING, 5) << "slow reader";
// Each message is written with one write(2), so lines from different threads never interleave.
// Format: "I1121 13:45:01.123456 1234 file.cc:42] message".
// Thread-safety: safe from any thread. The minimum severity is process-wide and is set once
// in main() from a flag; it is the one piece of global state besides the real clock.
#ifndef PDSERVE_COMMON_LOGGING_H_
#define PDSERVE_COMMON_LOGGING_H_

#include <atomic>
#include <sstream>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pdserve {

enum class LogSeverity : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Sets the minimum severity that is printed. Default kInfo.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();
// Parses "debug", "info", "warning", "error" (case-insensitive).
bool ParseLogSeverity(absl::string_view text, LogSeverity* out);

namespace logging_internal {

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  ~LogMessage();  // Writes the line; aborts after a kFatal message.
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Lets the macro below discard the stream expression when the severity is filtered out.
struct Voidify {
  void operator&(std::ostream&) {}
};

// Spellings the macros accept: PDS_LOG(DEBUG|INFO|WARNING|ERROR|FATAL).
inline constexpr LogSeverity kSeverity_DEBUG = LogSeverity::kDebug;
inline constexpr LogSeverity kSeverity_INFO = LogSeverity::kInfo;
inline constexpr LogSeverity kSeverity_WARNING = LogSeverity::kWarning;
inline constexpr LogSeverity kSeverity_ERROR = LogSeverity::kError;
inline constexpr LogSeverity kSeverity_FATAL = LogSeverity::kFatal;

// True at most once per `interval` for a given call site (its `last` slot).
bool ShouldLogEvery(std::atomic<int64_t>* last_nanos, absl::Duration interval);

}  // namespace logging_internal
}  // namespace pdserve

#define PDS_LOG_SEVERITY_(sev) ::pdserve::logging_internal::kSeverity_##sev
#define PDS_LOG_IS_ON_(sev) \
  (static_cast<int>(PDS_LOG_SEVERITY_(sev)) >= static_cast<int>(::pdserve::MinLogSeverity()))

#define PDS_LOG(sev)                                                                            \
  !PDS_LOG_IS_ON_(sev)                                                                          \
      ? (void)0                                                                                 \
      : ::pdserve::logging_internal::Voidify() &                                                \
            ::pdserve::logging_internal::LogMessage(__FILE__, __LINE__, PDS_LOG_SEVERITY_(sev)) \
                .stream()

// Logs at most once every `seconds` from this call site.
#define PDS_LOG_EVERY_N_SEC(sev, seconds)                                                    \
  for (static std::atomic<int64_t> pds_log_last_{0};                                         \
       PDS_LOG_IS_ON_(sev) &&                                                                \
       ::pdserve::logging_internal::ShouldLogEvery(&pds_log_last_, absl::Seconds(seconds));) \
    for (bool pds_log_once_ = true; pds_log_once_; pds_log_once_ = false)                    \
  ::pdserve::logging_internal::LogMessage(__FILE__, __LINE__, PDS_LOG_SEVERITY_(sev)).stream()

// Aborts with a message when an internal invariant is broken (programmer error, never input).
#define PDS_CHECK(cond)                                                                \
  (cond) ? (void)0                                                                     \
         : ::pdserve::logging_internal::Voidify() &                                    \
               ::pdserve::logging_internal::LogMessage(__FILE__, __LINE__,             \
                                                       ::pdserve::LogSeverity::kFatal) \
                       .stream()                                                       \
                   << "Check failed: " #cond " "

#endif  // PDSERVE_COMMON_LOGGING_H_
