#include "prefill_worker/prefill_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(int, max_batch_tokens, pdserve::prefill::PrefillBatcherConfig{}.max_batch_tokens,
          "Prompt tokens per prefill batch.");
ABSL_FLAG(std::string, transfer_mode, "layerwise",
          "layerwise (stream each layer) or bulk (after the forward).");
ABSL_FLAG(absl::Duration, layer_delay, absl::ZeroDuration(), "Testing: pause after every layer.");

namespace pdserve::prefill {

PrefillBatcherConfig PrefillBatcherConfigFromFlags() {
  PrefillBatcherConfig config;
  config.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  config.transfer_mode = absl::GetFlag(FLAGS_transfer_mode);
  config.layer_delay = absl::GetFlag(FLAGS_layer_delay);
  return config;
}

}  // namespace pdserve::prefill
