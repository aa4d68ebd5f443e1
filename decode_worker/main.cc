// pdserve-decode: a decode worker. Owns a model replica and a paged KV pool (registered with
// UCX so prefill workers can write into it), runs the continuous-batching scheduler, serves
// pdserve.v1.Decode over gRPC, and registers with the router.
#include <cstdio>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "decode_worker/decode_worker.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, worker_id, "", "Worker id reported to the router (default: decode-<address>).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC listen address, host:port (port 0: any free port).");
ABSL_FLAG(std::string, advertise_host, "", "Host others use to reach this worker (default: the listen host).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0", "/metrics listen address; empty disables.");
ABSL_FLAG(std::string, serving_info_path, "", "Write the bound addresses to this file once listening.");
ABSL_FLAG(std::string, router, "", "Router Registry address host:port; empty runs standalone.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30), "On SIGTERM, how long running requests may finish.");
ABSL_FLAG(int, threads, 0, "Forward-pass threads; 0 = all hardware threads.");
ABSL_FLAG(std::string, backend, "cpu", "Engine backend: cpu or cuda.");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(int, num_blocks, 0, "KV blocks in the pool (0: size by --kv_cache_bytes).");
ABSL_FLAG(int64_t, kv_cache_bytes, int64_t{512} << 20, "KV pool bytes when --num_blocks is 0.");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache dtype: f32, f16 or bf16.");
ABSL_FLAG(int, max_num_batched_tokens, 512, "Token budget per engine step (the local prefill chunk size).");
ABSL_FLAG(int, max_num_seqs, 256, "Maximum running sequences.");
ABSL_FLAG(int, max_waiting, 1024, "Maximum waiting requests; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(absl::Duration, retry_after, absl::Milliseconds(200), "Retry-after hint given with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_model_len, 0, "Maximum prompt + generated tokens (0: the model's).");
ABSL_FLAG(bool, prefix_caching, true, "Reuse KV of shared prompt prefixes.");
ABSL_FLAG(absl::Duration, max_client_stall, absl::Seconds(30),
          "A request whose client reads nothing this long is ended, freeing its KV blocks.");
ABSL_FLAG(std::string, kv_transport, "ucx", "KV transport for offloaded prefills: ucx or none.");
ABSL_FLAG(std::string, ucx_transports, "", "UCX transports (as UCX_TLS), e.g. shm, tcp; empty: UCX default.");
ABSL_FLAG(std::string, ucx_net_devices, "", "UCX network devices (as UCX_NET_DEVICES).");
ABSL_FLAG(std::string, ucx_data_path, "auto", "KV data path: auto, put or am.");
ABSL_FLAG(absl::Duration, offload_attempt_timeout, absl::Seconds(60),
          "Longest one offloaded prefill attempt may take (the request's deadline may be sooner).");
ABSL_FLAG(absl::Duration, offload_completion_timeout, absl::Seconds(5),
          "After a prefill worker answered, how long its KV transfer may take to complete.");
ABSL_FLAG(absl::Duration, offload_dead_after, absl::Seconds(2),
          "A prefill worker unreachable this long after a failed attempt is taken as dead (its blocks freed).");
ABSL_FLAG(absl::Duration, offload_cancel_retry, absl::Milliseconds(200),
          "Interval between CancelPrefill retries to an unreachable prefill worker.");
ABSL_FLAG(absl::Duration, offload_min_attempt_budget, absl::Milliseconds(50),
          "An offload attempt starts only while this much of the request's deadline is left.");
ABSL_FLAG(absl::Duration, offload_liveness_interval, absl::Milliseconds(500),
          "How often a prefill worker with an unanswered Prefill call is health-checked.");
ABSL_FLAG(absl::Duration, offload_liveness_timeout, absl::Seconds(1),
          "A prefill worker whose health check takes longer fails the attempt (local prefill).");

int main(int argc, char** argv) {
  pdserve::ShutdownSignal shutdown;
  pdserve::ParseCommandLine(argc, argv,
                            "pdserve-decode: decode worker (paged-KV continuous batching, gRPC Decode service).\n"
                            "Usage: pdserve-decode --model=DIR [--router=HOST:PORT] [--listen=HOST:PORT] ...");
  pdserve::decode::DecodeWorkerConfig config;
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
  config.scheduler.block_size = absl::GetFlag(FLAGS_block_size);
  config.scheduler.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  config.scheduler.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  config.scheduler.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  config.scheduler.enable_prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  config.scheduler.max_client_stall = absl::GetFlag(FLAGS_max_client_stall);
  config.scheduler.retry_after = absl::GetFlag(FLAGS_retry_after);
  config.num_blocks = absl::GetFlag(FLAGS_num_blocks);
  config.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  config.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  config.kv_transport = absl::GetFlag(FLAGS_kv_transport);
  config.transport.ucx.transports = absl::GetFlag(FLAGS_ucx_transports);
  config.transport.ucx.net_devices = absl::GetFlag(FLAGS_ucx_net_devices);
  config.transport.ucx.data_path = absl::GetFlag(FLAGS_ucx_data_path);
  config.offload.attempt_timeout = absl::GetFlag(FLAGS_offload_attempt_timeout);
  config.offload.completion_timeout = absl::GetFlag(FLAGS_offload_completion_timeout);
  config.offload.dead_after = absl::GetFlag(FLAGS_offload_dead_after);
  config.offload.cancel_retry = absl::GetFlag(FLAGS_offload_cancel_retry);
  config.offload.min_attempt_budget = absl::GetFlag(FLAGS_offload_min_attempt_budget);
  config.offload.liveness_interval = absl::GetFlag(FLAGS_offload_liveness_interval);
  config.offload.liveness_timeout = absl::GetFlag(FLAGS_offload_liveness_timeout);
  if (!pdserve::ParseDType(absl::GetFlag(FLAGS_kv_dtype), &config.kv_dtype)) {
    std::fprintf(stderr, "--kv_dtype: '%s' is not one of f32, f16, bf16\n", absl::GetFlag(FLAGS_kv_dtype).c_str());
    return 2;
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto worker = pdserve::decode::DecodeWorker::Create(config);
  if (!worker.ok()) {
    PDS_LOG(ERROR) << worker.status();
    return 1;
  }
  (*worker)->Run(shutdown);
  return 0;
}
