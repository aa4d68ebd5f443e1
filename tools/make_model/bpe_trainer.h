// Trains a byte-level BPE vocabulary (as Hugging Face's BpeTrainer does): pre-tokenize the
// corpus with the given regex, start from the 256 byte symbols, and repeatedly merge the
// most frequent adjacent pair (ties: the smaller pair of ids) until the vocabulary reaches
// its target size or no pair is left.
// Thread-safety: stateless.
#ifndef PDSERVE_TOOLS_MAKE_MODEL_BPE_TRAINER_H_
#define PDSERVE_TOOLS_MAKE_MODEL_BPE_TRAINER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::tools {

struct TrainedBpe {
  std::vector<std::string> tokens;                          // Byte-level token strings; index = id.
  std::vector<std::pair<std::string, std::string>> merges;  // In priority order.
};

absl::StatusOr<TrainedBpe> TrainBpe(const std::string& corpus, const std::string& pattern,
                                    int vocab_size);

}  // namespace pdserve::tools

#endif  // PDSERVE_TOOLS_MAKE_MODEL_BPE_TRAINER_H_
