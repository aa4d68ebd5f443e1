// pdserve-prefill: a prefill worker. Runs prompts through the model in batches and streams
// each layer's KV over UCX into the decode worker named by the request, while the next layer
// computes; returns the first sampled token.
#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/worker_flags.h"
#include "prefill_worker/prefill_worker.h"

ABSL_FLAG(int, max_batch_tokens, pdserve::prefill::PrefillBatcherConfig{}.max_batch_tokens,
          "Prompt tokens per prefill batch.");
ABSL_FLAG(std::string, transfer_mode, "layerwise",
          "layerwise (stream each layer) or bulk (after the forward).");
ABSL_FLAG(absl::Duration, layer_delay, absl::ZeroDuration(), "Testing: pause after every layer.");

namespace {

absl::StatusOr<pdserve::prefill::PrefillWorkerConfig> ConfigFromFlags() {
  pdserve::prefill::PrefillWorkerConfig config;
  ASSIGN_OR_RETURN(config.process, pdserve::WorkerProcessConfigFromFlags("prefill"));
  config.batcher.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  config.batcher.transfer_mode = absl::GetFlag(FLAGS_transfer_mode);
  config.batcher.layer_delay = absl::GetFlag(FLAGS_layer_delay);
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ShutdownSignal shutdown;
  pdserve::ParseCommandLine(
      argc, argv,
      "pdserve-prefill: prefill worker (layer-wise KV streaming over UCX).\n"
      "Usage: pdserve-prefill --model=DIR [--router=HOST:PORT] [--listen=HOST:PORT] ...");
  return pdserve::RunWorkerMain<pdserve::prefill::PrefillWorker>(ConfigFromFlags(), shutdown);
}
