// Reading a whole file into memory (configuration, tokenizer and template files).
#ifndef PDSERVE_COMMON_READ_FILE_H_
#define PDSERVE_COMMON_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

// Reads a whole file into a string; NotFound with the path if it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_READ_FILE_H_
