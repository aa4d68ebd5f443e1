#include "worker/worker_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net_address.h"
#include "common/secret_file.h"
#include "common/status_macros.h"
#include "engine/engine_flags.h"
#include "server/tls_flags.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, worker_id, "",
          "Worker id reported to the router (default: <role>-<advertised address>).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address, host:port (port 0: any free port).");
ABSL_FLAG(std::string, advertise_host, "",
          "Host others use to reach this worker (default: the listen host).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0", "/metrics listen address; empty disables.");
ABSL_FLAG(std::string, serving_info_path, "",
          "Write the bound addresses to this file once listening.");
ABSL_FLAG(std::string, router, "",
          "Routers' Registry address(es), host:port[,host:port...]; a name with several "
          "addresses (a headless Service) registers with each, re-resolved every 5 s. Empty: "
          "standalone.");
ABSL_FLAG(std::string, registration_token_file, "",
          "File holding the cluster's registration token, sent with every registration (the "
          "router's --registration_token_file); empty: none.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM, how long running work may finish.");
ABSL_FLAG(int, block_size, pdserve::WorkerProcessConfig{}.block_size,
          "Tokens per KV block (equal on the prefill and decode workers of a model); 0: the "
          "backend's (16; the emulated backend's profile's cluster.block_size).");
ABSL_FLAG(std::string, kv_dtype,
          std::string(pdserve::DTypeName(pdserve::WorkerProcessConfig{}.kv_dtype)),
          "KV cache dtype: f32, f16 or bf16 (equal on prefill and decode workers).");
ABSL_FLAG(int, num_blocks, 0, "KV blocks in the pool (0: size by --kv_cache_bytes).");
ABSL_FLAG(int64_t, kv_cache_bytes, pdserve::WorkerProcessConfig{}.kv_cache_bytes,
          "KV pool bytes when --num_blocks and --memory_bytes are 0.");
ABSL_FLAG(int64_t, memory_bytes, 0,
          "Bytes for the weights and the KV pool together (0: off). When set and --num_blocks is "
          "0, the KV pool gets what the weights as stored (--weight_dtype) leave.");
ABSL_FLAG(std::string, kv_staging, "auto",
          "How KV reaches the KV transport: auto (register the pool; stage through registered host "
          "memory when the pool is on a GPU) or always (stage a host pool too).");
ABSL_FLAG(int, kv_staging_blocks, 0,
          "Staging pool blocks (host memory registered with the transport, beside the KV pool); "
          "0: a quarter of the pool's blocks. A transfer needs as many as it writes.");
ABSL_FLAG(std::string, ucx_transports, "",
          "UCX transports (as UCX_TLS), e.g. shm, tcp; empty: UCX default.");
ABSL_FLAG(std::string, ucx_net_devices, "", "UCX network devices (as UCX_NET_DEVICES).");
ABSL_FLAG(std::string, ucx_data_path, "auto", "KV data path: auto, put or am.");

namespace pdserve {

absl::StatusOr<WorkerProcessConfig> WorkerProcessConfigFromFlags(const std::string& role) {
  WorkerProcessConfig c;
  c.role = role;
  c.model_dir = absl::GetFlag(FLAGS_model);
  c.worker_id = absl::GetFlag(FLAGS_worker_id);
  c.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  c.server.grpc.listen_address = absl::GetFlag(FLAGS_listen);
  c.server.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  c.server.serving_info_path = absl::GetFlag(FLAGS_serving_info_path);
  c.server.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  c.registry.router_address = absl::GetFlag(FLAGS_router);
  if (!c.registry.router_address.empty()) {
    for (absl::string_view router : absl::StrSplit(c.registry.router_address, ',')) {
      auto parsed = ParseHostPort(absl::StripAsciiWhitespace(router), "--router");
      if (!parsed.ok()) return parsed.status();
    }
  }
  if (const std::string file = absl::GetFlag(FLAGS_registration_token_file); !file.empty()) {
    auto token = ReadSecretFile(file, "--registration_token_file");
    if (!token.ok()) return token.status();
    c.registry.registration_token = *std::move(token);
  }
  c.block_size = absl::GetFlag(FLAGS_block_size);
  c.num_blocks = absl::GetFlag(FLAGS_num_blocks);
  c.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  c.memory_bytes = absl::GetFlag(FLAGS_memory_bytes);
  c.transport.ucx.transports = absl::GetFlag(FLAGS_ucx_transports);
  c.transport.ucx.net_devices = absl::GetFlag(FLAGS_ucx_net_devices);
  c.transport.ucx.data_path = absl::GetFlag(FLAGS_ucx_data_path);
  c.kv_staging = absl::GetFlag(FLAGS_kv_staging);
  c.kv_staging_blocks = absl::GetFlag(FLAGS_kv_staging_blocks);
  c.tls = TlsConfigFromFlags();
  const std::string dtype = absl::GetFlag(FLAGS_kv_dtype);
  if (!ParseDType(dtype, &c.kv_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_dtype: '", dtype, "' is not one of f32, f16, bf16"));
  }
  ASSIGN_OR_RETURN(c.engine, engine::EngineOptionsFromFlags(role, c.kv_dtype));
  return c;
}

}  // namespace pdserve
