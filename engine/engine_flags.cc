#include "engine/engine_flags.h"

#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, backend, "cpu",
          "Engine backend: cpu, cuda, or emulated (a --profile's timing instead of a forward "
          "pass, for clusters without the profile's GPUs; docs/emulated.md).");
ABSL_FLAG(int, threads, 0, "Forward-pass threads; 0 = all hardware threads.");
ABSL_FLAG(std::string, cpu_isa, "auto",
          "Backend cpu: the kernels' instruction set: auto (the best this CPU has, capped by "
          "$PDSERVE_MAX_CPU_ISA), avx512, avx2, neon (64-bit Arm) or scalar.");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "How weights are kept: auto (the checkpoint's dtype), f32, bf16 or f16.");
ABSL_FLAG(std::vector<std::string>, cuda_graph_batch_sizes, {},
          "Backend cuda: decode batch sizes that replay CUDA graphs, e.g. 1,2,4,8 (measure with "
          "pdserve-bench engine --backend=cuda; keep the sizes where replay wins). Default none.");
ABSL_FLAG(int, cuda_split_k_partition, 512,
          "Backend cuda: positions per split-K attention partition for small decode batches over "
          "long contexts; 0 never splits.");
ABSL_FLAG(std::string, profile, "",
          "Backend emulated: the performance profile whose timing the forward pass takes (a "
          "deploy/profiles/*.json or the cost_model.json pdserve-bench interference writes). "
          "Its cluster object sets the KV pool (block_size, kv_blocks).");
ABSL_FLAG(double, emulated_jitter, 0,
          "Backend emulated: sigma of the log-normal factor each step's time is multiplied by "
          "(mean 1, as pdserve-sim --step_jitter); 0: none.");
ABSL_FLAG(uint64_t, emulated_seed, 0,
          "Backend emulated: seed of the jitter draws; 0: a different one per process.");
ABSL_FLAG(int64_t, emulated_kv_bytes_per_token, 0,
          "Backend emulated: K and V bytes per token over all layers that really move (the "
          "link's time is the profile's for its model's bytes); 0: the least (16 per layer).");

namespace pdserve::engine {

absl::StatusOr<EngineOptions> EngineOptionsFromFlags(const std::string& timing, DType kv_dtype) {
  EngineOptions o;
  o.backend = absl::GetFlag(FLAGS_backend);
  o.num_threads = absl::GetFlag(FLAGS_threads);
  o.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  o.cpu_isa = absl::GetFlag(FLAGS_cpu_isa);
  for (const std::string& size : absl::GetFlag(FLAGS_cuda_graph_batch_sizes)) {
    int value = 0;
    if (!absl::SimpleAtoi(size, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda_graph_batch_sizes: '", size, "' is not an integer"));
    }
    o.cuda_graph_batch_sizes.push_back(value);
  }
  o.cuda_split_k_partition = absl::GetFlag(FLAGS_cuda_split_k_partition);
  o.emulated.profile_path = absl::GetFlag(FLAGS_profile);
  o.emulated.timing = timing;
  o.emulated.jitter = absl::GetFlag(FLAGS_emulated_jitter);
  o.emulated.jitter_seed = absl::GetFlag(FLAGS_emulated_seed);
  o.emulated.kv_bytes_per_token = absl::GetFlag(FLAGS_emulated_kv_bytes_per_token);
  o.emulated.kv_dtype = kv_dtype;
  RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace pdserve::engine
