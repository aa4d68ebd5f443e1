// Command-line parsing for every pdserve binary (Abseil flags). --help prints the usage line
// and the binary's own flags, then exits 0; unknown flags are an error naming the flag.
// Thread-safety: call once, at the start of main, before other threads exist.
#ifndef PDSERVE_COMMON_FLAGS_H_
#define PDSERVE_COMMON_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pdserve {

// Parses argv. Returns the positional arguments (argv[0] first). Also applies --log_level.
std::vector<std::string> ParseCommandLine(int argc, char** argv, absl::string_view usage);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_FLAGS_H_
