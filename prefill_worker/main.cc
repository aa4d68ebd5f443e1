// pdserve-prefill: a prefill worker. Runs prompts through the model in batches and streams
// each layer's KV over UCX into the decode worker named by the request, while the next layer
// computes; returns the first sampled token.
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/logging.h"
#include "prefill_worker/prefill_worker.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, worker_id, "", "Worker id reported to the router (default: prefill-<address>).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC listen address, host:port.");
ABSL_FLAG(std::string, advertise_host, "", "Host others use to reach this worker (default: the listen host).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0", "/metrics listen address; empty disables.");
ABSL_FLAG(std::string, serving_info_path, "", "Write the bound addresses to this file once listening.");
ABSL_FLAG(std::string, router, "", "Router Registry address host:port; empty runs standalone.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30), "On SIGTERM, how long running prefills may finish.");
ABSL_FLAG(int, threads, 0, "Forward-pass threads; 0 = all hardware threads.");
ABSL_FLAG(std::string, backend, "cpu", "Engine backend: cpu or cuda.");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block (must match the decode workers).");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache dtype: f32, f16 or bf16 (must match the decode workers).");
ABSL_FLAG(int64_t, kv_cache_bytes, int64_t{512} << 20, "Bytes of this worker's KV pool.");
ABSL_FLAG(int, max_batch_tokens, 8192, "Prompt tokens per prefill batch.");
ABSL_FLAG(std::string, transfer_mode, "layerwise", "layerwise (stream each layer) or bulk (after the forward).");
ABSL_FLAG(absl::Duration, layer_delay, absl::ZeroDuration(), "Testing: pause after every layer.");
ABSL_FLAG(std::string, ucx_transports, "", "UCX transports (as UCX_TLS), e.g. shm, tcp; empty: UCX default.");
ABSL_FLAG(std::string, ucx_net_devices, "", "UCX network devices (as UCX_NET_DEVICES).");
ABSL_FLAG(std::string, ucx_data_path, "auto", "KV data path: auto, put or am.");

int main(int argc, char** argv) {
  pdserve::ShutdownSignal shutdown;
  pdserve::ParseCommandLine(argc, argv,
                            "pdserve-prefill: prefill worker (layer-wise KV streaming over UCX).\n"
                            "Usage: pdserve-prefill --model=DIR [--router=HOST:PORT] [--listen=HOST:PORT] ...");
  pdserve::prefill::PrefillWorkerConfig config;
  config.model_dir = absl::GetFlag(FLAGS_model);
  config.worker_id = absl::GetFlag(FLAGS_worker_id);
  config.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  config.server.grpc.listen_address = absl::GetFlag(FLAGS_listen);
  config.server.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  config.server.serving_info_path = absl::GetFlag(FLAGS_serving_info_path);
  config.server.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  config.registry.router_address = absl::GetFlag(FLAGS_router);
  config.engine.backend = absl::GetFlag(FLAGS_backend);
  config.engine.num_threads = absl::GetFlag(FLAGS_threads);
  config.block_size = absl::GetFlag(FLAGS_block_size);
  config.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  config.batcher.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  config.batcher.transfer_mode = absl::GetFlag(FLAGS_transfer_mode);
  config.batcher.layer_delay = absl::GetFlag(FLAGS_layer_delay);
  config.transport.ucx.transports = absl::GetFlag(FLAGS_ucx_transports);
  config.transport.ucx.net_devices = absl::GetFlag(FLAGS_ucx_net_devices);
  config.transport.ucx.data_path = absl::GetFlag(FLAGS_ucx_data_path);
  if (!pdserve::ParseDType(absl::GetFlag(FLAGS_kv_dtype), &config.kv_dtype)) {
    std::fprintf(stderr, "--kv_dtype: '%s' is not one of f32, f16, bf16\n", absl::GetFlag(FLAGS_kv_dtype).c_str());
    return 2;
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto worker = pdserve::prefill::PrefillWorker::Create(config);
  if (!worker.ok()) {
    PDS_LOG(ERROR) << worker.status();
    return 1;
  }
  (*worker)->Run(shutdown);
  return 0;
}
