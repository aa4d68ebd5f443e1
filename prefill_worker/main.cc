// pdserve-prefill: a prefill worker. Runs prompts through the model in batches and streams
// each layer's KV over UCX into the decode worker named by the request, while the next layer
// computes; returns the first sampled token.
#include "common/flags.h"
#include "common/status_macros.h"
#include "prefill_worker/prefill_flags.h"
#include "prefill_worker/prefill_worker.h"
#include "worker/worker_flags.h"

namespace {

absl::StatusOr<pdserve::prefill::PrefillWorkerConfig> ConfigFromFlags() {
  pdserve::prefill::PrefillWorkerConfig config;
  ASSIGN_OR_RETURN(config.process, pdserve::WorkerProcessConfigFromFlags("prefill"));
  config.batcher = pdserve::prefill::PrefillBatcherConfigFromFlags();
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
