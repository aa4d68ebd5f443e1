#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"

namespace pdserve {
namespace {

std::atomic<int>& MinSeverityStorage() {
  static std::atomic<int> severity{static_cast<int>(LogSeverity::kInfo)};
  return severity;
}

char SeverityChar(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return 'D';
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
    case LogSeverity::kFatal:
      return 'F';
  }
  return '?';
}

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  MinSeverityStorage().store(static_cast<int>(severity), std::memory_order_relaxed);
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(MinSeverityStorage().load(std::memory_order_relaxed));
}

bool ParseLogSeverity(absl::string_view text, LogSeverity* out) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug")
    *out = LogSeverity::kDebug;
  else if (lower == "info")
    *out = LogSeverity::kInfo;
  else if (lower == "warning")
    *out = LogSeverity::kWarning;
  else if (lower == "error")
    *out = LogSeverity::kError;
  else
    return false;
  return true;
}

namespace logging_internal {

LogMessage::LogMessage(const char* file, int line, LogSeverity severity) : severity_(severity) {
  const absl::Time now = absl::Now();
  stream_ << SeverityChar(severity)
          << absl::FormatTime("%m%d %H:%M:%E6S", now, absl::LocalTimeZone()) << ' '
          << static_cast<long>(::syscall(SYS_gettid)) << ' ' << Basename(file) << ':' << line
          << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + written, text.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

bool ShouldLogEvery(std::atomic<int64_t>* last_nanos, absl::Duration interval) {
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = last_nanos->load(std::memory_order_relaxed);
  if (now - last < absl::ToInt64Nanoseconds(interval)) return false;
  return last_nanos->compare_exchange_strong(last, now, std::memory_order_relaxed);
}

}  // namespace logging_internal
}  // namespace pdserve
