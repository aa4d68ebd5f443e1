// pdserve-decode: a decode worker. Owns a model replica and a paged KV pool (registered with
// UCX so prefill workers can write into it), runs the continuous-batching scheduler, serves
// pdserve.v1.Decode over gRPC, and registers with the router. With --role_switching it can
// also be a prefill worker, and changes role when a router asks (role_switching_worker.h).
#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "decode_worker/decode_worker.h"
#include "decode_worker/role_switching_worker.h"
#include "prefill_worker/prefill_flags.h"
#include "worker/worker_flags.h"

ABSL_FLAG(int, max_num_batched_tokens, pdserve::decode::SchedulerConfig{}.max_num_batched_tokens,
          "Token budget per engine step (the local prefill chunk size).");
ABSL_FLAG(int, max_num_seqs, pdserve::decode::SchedulerConfig{}.max_num_seqs,
          "Maximum sequences stepped together (the decode batch's width).");
ABSL_FLAG(int, max_awaiting_kv, pdserve::decode::SchedulerConfig{}.max_awaiting_kv,
          "Maximum offloaded requests awaiting their KV from a prefill worker (they hold KV "
          "blocks, not a place in the batch); beyond it an offload falls back to local prefill.");
ABSL_FLAG(int, max_waiting, 1024, "Maximum waiting requests; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(absl::Duration, retry_after, absl::Milliseconds(200),
          "Retry-after hint given with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_model_len, 0, "Maximum prompt + generated tokens (0: the model's).");
ABSL_FLAG(bool, prefix_caching, true, "Reuse KV of shared prompt prefixes.");
ABSL_FLAG(absl::Duration, max_client_stall, absl::Seconds(30),
          "A request whose client reads nothing this long is ended, freeing its KV blocks.");
ABSL_FLAG(std::string, kv_transport, "ucx", "KV transport for offloaded prefills: ucx or none.");
ABSL_FLAG(absl::Duration, offload_attempt_timeout, absl::Seconds(60),
          "Longest one offloaded prefill attempt may take (the request's deadline may be sooner).");
ABSL_FLAG(absl::Duration, offload_completion_timeout, absl::Seconds(5),
          "After a prefill worker answered, how long its KV transfer may take to complete.");
ABSL_FLAG(absl::Duration, offload_dead_after, absl::Seconds(2),
          "A prefill worker unreachable this long after a failed attempt is taken as dead (its "
          "blocks freed).");
ABSL_FLAG(absl::Duration, offload_cancel_retry, absl::Milliseconds(200),
          "Interval between CancelPrefill retries to an unreachable prefill worker.");
ABSL_FLAG(absl::Duration, offload_min_attempt_budget, absl::Milliseconds(50),
          "An offload attempt starts only while this much of the request's deadline is left.");
ABSL_FLAG(absl::Duration, offload_liveness_interval, absl::Milliseconds(500),
          "How often a prefill worker with an unanswered Prefill call is health-checked.");
ABSL_FLAG(absl::Duration, offload_liveness_timeout, absl::Seconds(1),
          "A prefill worker whose health check takes longer fails the attempt (local prefill).");
ABSL_FLAG(bool, role_switching, false,
          "Also hold the prefill role (--max_batch_tokens, --transfer_mode), and change role "
          "when a router asks (pdctl switch-role, the router's planner).");
ABSL_FLAG(std::string, role, "decode", "With --role_switching: the role to start in.");
ABSL_FLAG(absl::Duration, switch_drain_timeout,
          pdserve::decode::RoleSwitchingWorkerConfig{}.switch_drain_timeout,
          "With --role_switching: a switch whose current work has not finished by then is given "
          "up (the worker keeps its role).");

namespace {

absl::StatusOr<pdserve::decode::DecodeWorkerConfig> ConfigFromFlags() {
  pdserve::decode::DecodeWorkerConfig config;
  ASSIGN_OR_RETURN(config.process, pdserve::WorkerProcessConfigFromFlags("decode"));
  config.scheduler.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  config.scheduler.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  config.scheduler.max_awaiting_kv = absl::GetFlag(FLAGS_max_awaiting_kv);
  config.scheduler.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  config.scheduler.enable_prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  config.scheduler.max_client_stall = absl::GetFlag(FLAGS_max_client_stall);
  config.scheduler.retry_after = absl::GetFlag(FLAGS_retry_after);
  config.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  config.kv_transport = absl::GetFlag(FLAGS_kv_transport);
  config.offload.attempt_timeout = absl::GetFlag(FLAGS_offload_attempt_timeout);
  config.offload.completion_timeout = absl::GetFlag(FLAGS_offload_completion_timeout);
  config.offload.dead_after = absl::GetFlag(FLAGS_offload_dead_after);
  config.offload.cancel_retry = absl::GetFlag(FLAGS_offload_cancel_retry);
  config.offload.min_attempt_budget = absl::GetFlag(FLAGS_offload_min_attempt_budget);
  config.offload.liveness_interval = absl::GetFlag(FLAGS_offload_liveness_interval);
  config.offload.liveness_timeout = absl::GetFlag(FLAGS_offload_liveness_timeout);
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ShutdownSignal shutdown;
  pdserve::ParseCommandLine(
      argc, argv,
      "pdserve-decode: decode worker (paged-KV continuous batching, gRPC Decode service).\n"
      "Usage: pdserve-decode --model=DIR [--router=HOST:PORT] [--listen=HOST:PORT] ...");
  if (absl::GetFlag(FLAGS_role_switching)) {
    absl::StatusOr<pdserve::decode::RoleSwitchingWorkerConfig> config;
    if (auto decode = ConfigFromFlags(); decode.ok()) {
      config.emplace();
      config->decode = *std::move(decode);
      config->prefill = pdserve::prefill::PrefillBatcherConfigFromFlags();
      config->initial_role = absl::GetFlag(FLAGS_role);
      config->switch_drain_timeout = absl::GetFlag(FLAGS_switch_drain_timeout);
    } else {
      config = decode.status();
    }
    return pdserve::RunWorkerMain<pdserve::decode::RoleSwitchingWorker>(config, shutdown);
  }
  if (absl::GetFlag(FLAGS_role) != "decode") {
    std::fprintf(stderr, "--role: only with --role_switching (use pdserve-prefill)\n");
    return 2;
  }
  return pdserve::RunWorkerMain<pdserve::decode::DecodeWorker>(ConfigFromFlags(), shutdown);
}
