#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"

ABSL_FLAG(std::string, log_level, "info", "Minimum log severity: debug, info, warning, error.");

namespace pdserve {
namespace {

bool IsHelpArgument(absl::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpfull";
}

// Flags defined in pdserve's own sources (the binaries' main files and common/), not the
// ones libraries bring.
// Filename() is normalized by Abseil, which strips leading slashes ("/src/x.cc" reads
// "src/x.cc"), so both sides are compared without them; comparing the raw source directory hid
// every flag of common/ (--router, --tls_cert...) from --help.
bool IsOwnFlag(const absl::CommandLineFlag& flag) {
  const std::string file = flag.Filename();
  absl::string_view source_dir = PDSERVE_SOURCE_DIR;
  absl::string_view relative_file = file;
  while (absl::ConsumePrefix(&source_dir, "/")) {
  }
  while (absl::ConsumePrefix(&relative_file, "/")) {
  }
  return absl::StartsWith(relative_file, source_dir) || absl::StrContains(file, "main.cc") ||
         absl::StrContains(file, "common/flags.cc");
}

// Abseil's built-in --help exits with status 1 and lists flags by file; ours prints the
// usage and the binary's flags sorted by name, and exits 0.
[[noreturn]] void PrintHelpAndExit(absl::string_view usage) {
  std::string out(usage);
  out += "\n\nFlags:\n";
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsOwnFlag(*flag)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  for (const absl::CommandLineFlag* flag : flags) {
    out += "  --" + std::string(flag->Name()) + "  (default: \"" + flag->DefaultValue() +
           "\")\n      " + flag->Help() + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  std::exit(0);
}

}  // namespace

std::vector<std::string> ParseCommandLine(int argc, char** argv, absl::string_view usage) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    if (IsHelpArgument(argv[i])) PrintHelpAndExit(usage);
  }
  absl::FlagsUsageConfig config;
  // Flags are defined in the binaries' main files and in common/ (log_level); --help shows
  // those and hides flags that libraries may define.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "main") || absl::StrContains(file, "common/flags");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.normalize_filename = [](absl::string_view file) {
    const size_t pos = file.rfind("pdserve/");
    return std::string(pos == absl::string_view::npos ? file : file.substr(pos));
  };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  LogSeverity severity;
  if (!ParseLogSeverity(absl::GetFlag(FLAGS_log_level), &severity)) {
    std::fprintf(stderr, "--log_level: '%s' is not one of debug, info, warning, error\n",
                 absl::GetFlag(FLAGS_log_level).c_str());
    std::exit(2);
  }
  SetMinLogSeverity(severity);
#ifdef NDEBUG
  // Abseil's deadlock detection, on in Debian's Abseil, records every lock acquisition in a
  // lock graph: 2.6 % of the router's time at 256 workers and 4.5 % of a placement decision
  // (perf). Release builds of pdserve turn it off; debug and sanitizer builds keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace pdserve
