#include "bench/engine/engine_bench.h"

#include <cblas.h>

#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/cpu/aligned_buffer.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/cpu_model.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/roofline.h"
#include "engine/model_loader.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Median;
using measure::Progress;
using measure::WriteSummary;
namespace {

using engine::AlignedBuffer;

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// Bytes copied per second by `threads` threads copying disjoint halves of a 512 MiB buffer
// (best of 4), the usual memcpy-ceiling measure.
double MemcpyBandwidth(int threads) {
  const size_t bytes = size_t{512} << 20;
  AlignedBuffer<char> src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);
  engine::ThreadPool pool(threads);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const absl::Time start = absl::Now();
    pool.ParallelFor(threads, [&](int begin, int end) {
      for (int t = begin; t < end; ++t) {
        const size_t chunk = bytes / threads;
        std::memcpy(dst.data() + t * chunk, src.data() + t * chunk, chunk);
      }
    });
    best = std::max(best, bytes / Seconds(start));
  }
  return best;
}

// Bytes read per second by `threads` threads summing disjoint parts of a 512 MiB buffer
// (best of 4): what a decode step that streams its weights can reach.
double ReadBandwidth(int threads) {
  const size_t bytes = size_t{512} << 20;
  AlignedBuffer<float> src(bytes / sizeof(float));
  for (size_t i = 0; i < src.size(); i += 1024) src[i] = 1.0f;
  engine::ThreadPool pool(threads);
  double best = 0;
  std::vector<float> sinks(threads);
  for (int rep = 0; rep < 4; ++rep) {
    const absl::Time start = absl::Now();
    pool.ParallelFor(threads, [&](int begin, int end) {
      for (int t = begin; t < end; ++t) {
        const size_t n = src.size() / threads;
        const float* p = src.data() + t * n;
        float acc[8] = {0};
        for (size_t i = 0; i < n; i += 8) {
          for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
        }
        sinks[t] = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
      }
    });
    best = std::max(best, bytes / Seconds(start));
  }
  return best + 0 * sinks[0];
}

using GemmShape = engine::cuda::GemmShape;

// The GEMMs of one prefill of `tokens` tokens (every layer, plus lm_head for one row).
std::vector<GemmShape> PrefillGemms(const ModelConfig& c, int tokens) {
  std::vector<GemmShape> shapes;
  for (int l = 0; l < c.num_layers; ++l) {
    shapes.push_back({tokens, c.q_dim() + 2 * c.kv_dim(), c.hidden_size});
    shapes.push_back({tokens, c.hidden_size, c.q_dim()});
    shapes.push_back({tokens, 2 * c.intermediate_size, c.hidden_size});
    shapes.push_back({tokens, c.hidden_size, c.intermediate_size});
  }
  shapes.push_back({1, c.vocab_size, c.hidden_size});
  return shapes;
}

double Flops(const std::vector<GemmShape>& shapes) {
  double f = 0;
  for (const GemmShape& s : shapes) f += 2.0 * s.m * s.n * s.k;
  return f;
}

// The kernels OpenBLAS chose for this CPU (e.g. "Haswell" for AVX2, "SkylakeX" or "Zen" with
// AVX-512 on recent releases). The sgemm fraction compares our kernels with these: with
// --cpu_isa=avx2 on an AVX-512 machine, OPENBLAS_CORETYPE=Haswell in the environment gives
// OpenBLAS's AVX2 kernels too, as a machine without AVX-512 runs them.
std::string OpenBlasCore() {
  const char* core = openblas_get_corename();
  return core != nullptr ? core : "unknown";
}

// OpenBLAS sgemm throughput (FLOP/s) running the same shapes (best of 2).
double OpenBlasFlops(const std::vector<GemmShape>& shapes, int threads) {
  openblas_set_num_threads(threads);
  size_t max_a = 0, max_b = 0, max_c = 0;
  for (const GemmShape& s : shapes) {
    max_a = std::max(max_a, size_t(s.m) * s.k);
    max_b = std::max(max_b, size_t(s.n) * s.k);
    max_c = std::max(max_c, size_t(s.m) * s.n);
  }
  AlignedBuffer<float> a(max_a), b(max_b), c(max_c);
  for (size_t i = 0; i < max_a; ++i) a[i] = static_cast<float>((i % 17) * 0.01);
  for (size_t i = 0; i < max_b; ++i) b[i] = static_cast<float>((i % 13) * 0.01);
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
    const absl::Time start = absl::Now();
    for (const GemmShape& s : shapes) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                  b.data(), s.k, 0.0f, c.data(), s.n);
    }
    best = std::max(best, Flops(shapes) / Seconds(start));
  }
  return best;
}

// Median step time of single-token decode steps per batch size (cfg.decode_batches), each
// sequence holding cfg.decode_context tokens, sampling greedily as the decode worker does (on
// the device where the backend samples there).
absl::StatusOr<std::vector<std::pair<int, double>>> TimeDecodeSteps(engine::Model& model,
                                                                    const EngineBenchConfig& cfg,
                                                                    DType kv_dtype) {
  const ModelConfig& c = model.config();
  const int max_batch = *std::max_element(cfg.decode_batches.begin(), cfg.decode_batches.end());
  const int blocks_per_seq = (cfg.decode_context + cfg.decode_steps + 2 + 15) / 16;
  ASSIGN_OR_RETURN(auto pool, model.AllocateKvPool(
                                  model.MakeKvLayout(max_batch * blocks_per_seq, 16, kv_dtype)));
  std::vector<std::vector<int32_t>> tables(max_batch);
  for (int s = 0; s < max_batch; ++s) {
    tables[s].resize(blocks_per_seq);
    std::iota(tables[s].begin(), tables[s].end(), s * blocks_per_seq);
  }
  engine::Logits logits;
  for (int s0 = 0; s0 < max_batch; s0 += 8) {  // Prefill contexts 8 sequences at a time.
    engine::PackedBatch batch;
    std::vector<std::vector<int32_t>> prompts;
    for (int s = s0; s < std::min(max_batch, s0 + 8); ++s) {
      prompts.emplace_back(cfg.decode_context);
      for (int i = 0; i < cfg.decode_context; ++i)
        prompts.back()[i] = (s * 131 + i * 7) % c.vocab_size;
    }
    for (int s = s0; s < std::min(max_batch, s0 + 8); ++s)
      batch.Add(prompts[s - s0], 0, tables[s], false);
    RETURN_IF_ERROR(model.Forward(batch, *pool, {}, &logits));
  }
  text::SamplingConfig greedy;
  greedy.temperature = 0;
  engine::SamplerScratch scratch;
  std::vector<std::pair<int, double>> out;
  for (int b : cfg.decode_batches) {
    std::vector<double> times;
    // Two warm-up steps: the first of a shape may allocate, the second may capture a graph.
    for (int step = 0; step < cfg.decode_steps + 2; ++step) {
      engine::PackedBatch batch;
      std::vector<int32_t> token(b);
      std::vector<engine::RowSampling> rows(b);
      for (int s = 0; s < b; ++s) {
        token[s] = (step * 17 + s) % c.vocab_size;
        rows[s] = {&greedy, static_cast<uint64_t>(cfg.decode_context + (step % 2) + 1)};
      }
      for (int s = 0; s < b; ++s) {
        batch.Add(absl::MakeConstSpan(&token[s], 1), cfg.decode_context + (step % 2), tables[s],
                  true);
      }
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(engine::ForwardAndSample(model, batch, *pool, {}, rows, &logits, &scratch));
      if (step > 1) times.push_back(Seconds(start) * 1e3);
    }
    out.emplace_back(b, Median(times));
    Progress("engine", absl::StrCat("decode batch ", b, ": ", Fixed(Median(times)), " ms/step"));
  }
  return out;
}

// Median seconds of a fresh `tokens`-token prefill (cfg.prefill_repetitions runs).
absl::StatusOr<double> TimePrefill(engine::Model& model, const EngineBenchConfig& cfg,
                                   DType kv_dtype, int tokens) {
  const int blocks = (tokens + 15) / 16;
  ASSIGN_OR_RETURN(auto pool, model.AllocateKvPool(model.MakeKvLayout(blocks, 16, kv_dtype)));
  std::vector<int32_t> table(blocks), prompt(tokens);
  std::iota(table.begin(), table.end(), 0);
  for (int i = 0; i < tokens; ++i) prompt[i] = (i * 31 + 7) % model.config().vocab_size;
  engine::Logits logits;
  std::vector<double> times;
  for (int rep = 0; rep < cfg.prefill_repetitions + 1; ++rep) {
    engine::PackedBatch batch;
    batch.Add(prompt, 0, table, true);
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(model.Forward(batch, *pool, {}, &logits));
    if (rep > 0) times.push_back(Seconds(start));  // The first warms up.
  }
  return Median(times);
}

struct ThreadResult {
  int threads = 0;
  std::string weight_type = "f32";  // How the model kept its weights.
  std::string instruction_set;      // Of the CPU kernels (cpu_isa.h).
  double memcpy_gbps = 0;
  double read_gbps = 0;
  double decode_floor_ms = 0;
  double decode_read_floor_ms = 0;
  std::vector<std::pair<int, double>> decode_ms;                 // (batch, median step ms)
  std::vector<std::tuple<int, double, double, double>> prefill;  // (tokens, ms, tok/s, fraction)
  double sgemm_gflops_2048 = 0;
};

absl::StatusOr<ThreadResult> MeasureAtThreads(const std::string& dir, const EngineBenchConfig& cfg,
                                              int threads) {
  ThreadResult r;
  r.threads = threads;
  DType kv_dtype;
  if (!ParseDType(cfg.kv_dtype, &kv_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_dtype: '", cfg.kv_dtype, "' is not one of f32, f16, bf16"));
  }
  Progress("engine", absl::StrCat("loading ", dir, " with ", threads, " thread(s)"));
  ASSIGN_OR_RETURN(engine::LoadedModel loaded,
                   engine::LoadModel(dir, engine::EngineOptions{.num_threads = threads,
                                                                .weight_dtype = cfg.weight_dtype,
                                                                .cpu_isa = cfg.cpu_isa}));
  engine::Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  if (const auto* cpu = dynamic_cast<const engine::CpuModel*>(&model))
    r.weight_type = engine::WeightTypeName(cpu->weight_type());
  r.instruction_set = model.instruction_set();

  r.memcpy_gbps = MemcpyBandwidth(threads) / 1e9;
  r.read_gbps = ReadBandwidth(threads) / 1e9;
  r.decode_floor_ms = model.weight_bytes() / (r.memcpy_gbps * 1e9) * 1e3;
  r.decode_read_floor_ms = model.weight_bytes() / (r.read_gbps * 1e9) * 1e3;
  Progress(
      "engine",
      absl::StrCat("memcpy ", Fixed(r.memcpy_gbps, 1), " GB/s, read ", Fixed(r.read_gbps, 1),
                   " GB/s; decode floor ", Fixed(r.decode_floor_ms), " ms (copy) / ",
                   Fixed(r.decode_read_floor_ms), " ms (read) for ", model.weight_bytes() >> 20,
                   " MiB of ", r.weight_type, " weights; ", r.instruction_set, " kernels"));

  ASSIGN_OR_RETURN(r.decode_ms, TimeDecodeSteps(model, cfg, kv_dtype));

  // Prefill: one fresh sequence of P tokens per forward.
  for (int p : cfg.prefill_lengths) {
    ASSIGN_OR_RETURN(const double seconds, TimePrefill(model, cfg, kv_dtype, p));
    const auto shapes = PrefillGemms(c, p);
    const double sgemm = OpenBlasFlops(shapes, threads);
    const double ours = Flops(shapes) / seconds;
    r.prefill.emplace_back(p, seconds * 1e3, p / seconds, ours / sgemm);
    if (p == 2048) r.sgemm_gflops_2048 = sgemm / 1e9;
    Progress("engine", absl::StrCat("prefill ", p, ": ", Fixed(seconds * 1e3, 1), " ms, ",
                                    Fixed(ours / 1e9, 1), " GFLOP/s vs OpenBLAS sgemm ",
                                    Fixed(sgemm / 1e9, 1)));
  }
  return r;
}

// --backend=cuda: the same decode and prefill measurements on GPU 0, beside the device's
// ceilings measured in the same run (copy bandwidth, cuBLAS on the same GEMMs), and each
// decode batch size eager and replaying a CUDA graph (two loads of the model, one at a time).
absl::Status MeasureCuda(const std::string& dir, const EngineBenchConfig& cfg) {
  DType kv_dtype;
  if (!ParseDType(cfg.kv_dtype, &kv_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_dtype: '", cfg.kv_dtype, "' is not one of f32, f16, bf16"));
  }
  engine::EngineOptions options{.backend = "cuda", .weight_dtype = cfg.weight_dtype};
  std::vector<std::pair<int, double>> eager, graphed;
  std::vector<std::tuple<int, double, double, double>> prefill;  // (P, ms, tok/s, of cuBLAS)
  size_t weight_bytes = 0;
  double copy_gbps = 0;
  std::string weight_type;
  {
    Progress("engine", "loading " + dir + " on the GPU (eager)");
    ASSIGN_OR_RETURN(engine::LoadedModel loaded, engine::LoadModel(dir, options));
    engine::Model& model = *loaded.model;
    weight_bytes = model.weight_bytes();
    const ModelConfig& c = model.config();
    ASSIGN_OR_RETURN(const double copy, engine::cuda::DeviceCopyBandwidth(0));
    copy_gbps = copy / 1e9;
    Progress("engine", absl::StrCat("device copy ", Fixed(copy_gbps, 0), " GB/s; decode floor ",
                                    Fixed(weight_bytes / copy * 1e3), " ms for ",
                                    weight_bytes >> 20, " MiB of weights"));
    ASSIGN_OR_RETURN(eager, TimeDecodeSteps(model, cfg, kv_dtype));
    // cuBLAS runs the GEMMs in the type the model keeps its weights in.
    const DType weight_dtype = engine::cuda::GetCudaWeightDtype(model).value_or(DType::kF32);
    weight_type = std::string(DTypeName(weight_dtype));
    for (int p : cfg.prefill_lengths) {
      ASSIGN_OR_RETURN(const double seconds, TimePrefill(model, cfg, kv_dtype, p));
      const auto shapes = PrefillGemms(c, p);
      ASSIGN_OR_RETURN(const double cublas, engine::cuda::CublasGemmFlops(shapes, weight_dtype, 0));
      const double ours = Flops(shapes) / seconds;
      prefill.emplace_back(p, seconds * 1e3, p / seconds, ours / cublas);
      Progress("engine",
               absl::StrCat("prefill ", p, ": ", Fixed(seconds * 1e3, 2), " ms, ",
                            Fixed(ours / 1e12, 1), " TFLOP/s vs cuBLAS ", Fixed(cublas / 1e12, 1)));
    }
  }
  {
    Progress("engine", "loading " + dir + " on the GPU (CUDA graphs for every decode batch)");
    options.cuda_graph_batch_sizes = cfg.decode_batches;
    ASSIGN_OR_RETURN(engine::LoadedModel loaded, engine::LoadModel(dir, options));
    ASSIGN_OR_RETURN(graphed, TimeDecodeSteps(*loaded.model, cfg, kv_dtype));
    const engine::cuda::CudaGraphStats stats = engine::cuda::GetCudaGraphStats(*loaded.model);
    Progress("engine",
             absl::StrCat(stats.captured, " graphs captured, ", stats.replays, " replays"));
  }

  const double floor_ms = weight_bytes / (copy_gbps * 1e9) * 1e3;
  Table table({"metric", "eager", "CUDA graph", "graph / eager", "floor / baseline", "ratio"});
  nlohmann::json decode = nlohmann::json::object();
  std::vector<int> graphs_win;
  double b1 = 0;
  for (size_t i = 0; i < eager.size(); ++i) {
    const auto [b, ms] = eager[i];
    const double graph_ms = graphed[i].second;
    if (b == 1) b1 = std::min(ms, graph_ms);
    if (graph_ms < ms) graphs_win.push_back(b);
    table.AddRow({absl::StrCat("decode step, batch ", b), Fixed(ms, 3) + " ms",
                  Fixed(graph_ms, 3) + " ms", Fixed(graph_ms / ms),
                  b == 1 ? Fixed(floor_ms, 3) + " ms HBM floor" : "",
                  b == 1 ? Fixed(std::min(ms, graph_ms) / floor_ms) + "x floor"
                         : Fixed(b / std::min(ms, graph_ms) * 1e3, 0) + " tok/s"});
    decode[absl::StrCat(b)] = {{"eager_ms", ms},
                               {"graph_ms", graph_ms},
                               {"graph_over_eager", graph_ms / ms},
                               {"tokens_per_s", b / std::min(ms, graph_ms) * 1e3}};
  }
  nlohmann::json prefill_json = nlohmann::json::object();
  double fraction_2048 = 0;
  for (auto [p, ms, tps, fraction] : prefill) {
    table.AddRow({absl::StrCat("prefill ", p, " tokens"), Fixed(tps, 0) + " tok/s", "", "",
                  "cuBLAS, same GEMMs", Fixed(fraction) + " of cuBLAS"});
    prefill_json[absl::StrCat(p)] = {
        {"ms", ms}, {"tokens_per_s", tps}, {"fraction_of_cublas", fraction}};
    if (p == 2048) fraction_2048 = fraction;
  }
  std::printf("%s", table.ToString().c_str());
  std::printf("CUDA graphs win at batch sizes: %s (--cuda_graph_batch_sizes)\n",
              absl::StrJoin(graphs_win, ",").c_str());
  nlohmann::json summary = {
      {"bench", "engine"},
      {"backend", "cuda"},
      {"model", dir},
      {"weight_dtype", weight_type},
      {"kv_dtype", cfg.kv_dtype},
      {"machine", MachineInfo()},
      {"device_copy_gbps", copy_gbps},
      {"decode_floor_ms", floor_ms},
      {"decode_b1_over_floor", b1 > 0 ? b1 / floor_ms : 0},
      {"prefill_2048_fraction_of_cublas", fraction_2048},
      {"decode", decode},
      {"prefill", prefill_json},
      {"cuda_graphs_win_at", graphs_win},
  };
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf("summary: %s/summary.json\n", cfg.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunEngineBench(const EngineBenchConfig& input) {
  EngineBenchConfig cfg = input;
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  std::string dir = cfg.model_dir;
  if (dir.empty()) {
    dir = "models/small";
    Progress("engine", "no --model: using the small preset at " + dir);
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("small"));
    RETURN_IF_ERROR(tools::EnsureModel(spec, dir));
  }
  if (cfg.backend == "cuda") return MeasureCuda(dir, cfg);
  if (cfg.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: '", cfg.backend, "' is not one of cpu, cuda"));
  }
  if (cfg.thread_counts.empty()) {
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    cfg.thread_counts = all > 1 ? std::vector<int>{1, all} : std::vector<int>{1};
  }
  std::vector<ThreadResult> results;
  for (int threads : cfg.thread_counts) {
    ASSIGN_OR_RETURN(ThreadResult r, MeasureAtThreads(dir, cfg, threads));
    results.push_back(std::move(r));
  }

  Table table({"threads", "metric", "value", "floor / baseline", "ratio"});
  nlohmann::json per_threads = nlohmann::json::array();
  for (const ThreadResult& r : results) {
    nlohmann::json j = {{"threads", r.threads},
                        {"memcpy_gbps", r.memcpy_gbps},
                        {"read_gbps", r.read_gbps},
                        {"decode_floor_ms", r.decode_floor_ms},
                        {"decode_read_floor_ms", r.decode_read_floor_ms}};
    double b1 = 0;
    for (auto [b, ms] : r.decode_ms) {
      if (b == 1) b1 = ms;
    }
    for (auto [b, ms] : r.decode_ms) {
      const double per_token_speedup = b1 > 0 ? (b / ms) / (1 / b1) : 0;
      table.AddRow({absl::StrCat(r.threads), absl::StrCat("decode step, batch ", b),
                    Fixed(ms) + " ms",
                    b == 1 ? Fixed(r.decode_floor_ms) + " ms copy / " +
                                 Fixed(r.decode_read_floor_ms) + " ms read floor"
                           : "",
                    b == 1 ? Fixed(ms / r.decode_floor_ms) + "x copy, " +
                                 Fixed(ms / r.decode_read_floor_ms) + "x read floor"
                           : Fixed(per_token_speedup) + "x tok/s vs b1"});
      j["decode_ms"][absl::StrCat(b)] = ms;
      j["decode_tokens_per_s"][absl::StrCat(b)] = b / ms * 1e3;
    }
    for (auto [p, ms, tps, fraction] : r.prefill) {
      table.AddRow({absl::StrCat(r.threads), absl::StrCat("prefill ", p, " tokens"),
                    Fixed(tps, 0) + " tok/s", "OpenBLAS sgemm", Fixed(fraction) + " of sgemm"});
      j["prefill"][absl::StrCat(p)] = {
          {"ms", ms}, {"tokens_per_s", tps}, {"fraction_of_sgemm", fraction}};
    }
    per_threads.push_back(j);
  }
  std::printf("%s kernels on %s; OpenBLAS sgemm on its %s kernels\n%s",
              results.front().instruction_set.c_str(), engine::CpuModelName().c_str(),
              OpenBlasCore().c_str(), table.ToString().c_str());

  // Headline keys from the single-thread run (the floors are per core there).
  const ThreadResult& one = results.front();
  double b1 = 0, b8 = 0, fraction_2048 = 0;
  for (auto [b, ms] : one.decode_ms) {
    if (b == 1) b1 = ms;
    if (b == 8) b8 = ms;
  }
  for (auto [p, ms, tps, fraction] : one.prefill) {
    if (p == 2048) fraction_2048 = fraction;
  }
  nlohmann::json summary = {
      {"bench", "engine"},
      {"model", dir},
      {"weight_dtype", results.front().weight_type},
      {"kv_dtype", cfg.kv_dtype},
      {"decode_context_tokens", cfg.decode_context},
      {"instruction_set", results.front().instruction_set},
      {"openblas_core", OpenBlasCore()},
      {"machine", MachineInfo()},
      {"threads_for_headline", one.threads},
      {"decode_b1_over_floor", b1 > 0 ? b1 / one.decode_floor_ms : 0},
      {"decode_b1_over_read_floor", b1 > 0 ? b1 / one.decode_read_floor_ms : 0},
      {"decode_b8_speedup_per_token", b1 > 0 && b8 > 0 ? (8 / b8) / (1 / b1) : 0},
      {"prefill_2048_fraction_of_sgemm", fraction_2048},
      {"per_thread_count", per_threads},
  };
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf("summary: %s/summary.json\n", cfg.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::bench
