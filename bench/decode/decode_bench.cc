#include "bench/decode/decode_bench.h"

#include <atomic>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "decode_worker/engine_loop.h"
#include "engine/model_loader.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Median;
using measure::Percentile;
using measure::Progress;
using measure::WriteSummary;
namespace {

using decode::EngineLoop;
using decode::Sequence;

// Counts tokens; reports completion to a callback.
class CountingSink final : public decode::StreamSink {
 public:
  CountingSink(std::atomic<int64_t>* tokens, std::function<void()> on_finish)
      : tokens_(tokens), on_finish_(std::move(on_finish)) {}
  void PushTokens(const std::vector<int32_t>& ids, const std::string&, int64_t) override {
    tokens_->fetch_add(static_cast<int64_t>(ids.size()));
  }
  void Finish(const Final&) override {
    if (on_finish_) on_finish_();
  }
  void HandBack(const std::string&) override {
    if (on_finish_) on_finish_();
  }
  int pending_tokens() const override { return 0; }
  bool cancelled() const override { return false; }

 private:
  std::atomic<int64_t>* tokens_;
  std::function<void()> on_finish_;
};

struct Harness {
  engine::LoadedModel model;
  std::unique_ptr<kvcache::KvPool> pool;
  std::unique_ptr<prometheus::Registry> registry;
  std::unique_ptr<decode::DecodeMetrics> metrics;
  std::unique_ptr<EngineLoop> loop;
  std::atomic<int64_t> tokens{0};

  std::unique_ptr<Sequence> MakeSequence(int prompt_len, int max_tokens, uint32_t seed,
                                         std::function<void()> on_finish) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = absl::StrCat("bench-", seed);
    seq->arrival = absl::Now();
    std::mt19937 rng(seed);
    seq->tokens.resize(prompt_len);
    for (auto& t : seq->tokens) t = static_cast<int32_t>(rng() % model.model->config().vocab_size);
    seq->prompt_len = prompt_len;
    seq->sampling.max_tokens = max_tokens;
    seq->sampling.temperature = 0;
    seq->sampling.ignore_eos = true;
    seq->stream = std::make_unique<text::GenerationStream>(model.tokenizer.get(), seq->sampling,
                                                           model.eos_token_ids);
    seq->sink = std::make_shared<CountingSink>(&tokens, std::move(on_finish));
    return seq;
  }
};

absl::StatusOr<std::unique_ptr<Harness>> MakeHarness(const std::string& dir, int threads, int width,
                                                     int budget) {
  auto h = std::make_unique<Harness>();
  ASSIGN_OR_RETURN(h->model, engine::LoadModel(dir, engine::EngineOptions{.num_threads = threads}));
  KvLayout layout = h->model.model->MakeKvLayout(1, 16, DType::kF32);
  layout.num_blocks = width * 20 + 64;  // 300 tokens per sequence is plenty here.
  ASSIGN_OR_RETURN(h->pool, kvcache::KvPool::Allocate(layout));
  h->registry = std::make_unique<prometheus::Registry>();
  h->metrics = std::make_unique<decode::DecodeMetrics>(*h->registry, "bench");
  decode::SchedulerConfig sc;
  sc.max_num_seqs = width;
  sc.max_num_batched_tokens = budget;
  sc.max_waiting = 1 << 20;
  sc.model_fingerprint = h->model.model->fingerprint();
  h->loop =
      std::make_unique<EngineLoop>(h->model.model.get(), h->pool.get(), h->model.eos_token_ids, sc,
                                   h->metrics.get(), Clock::Real());
  h->loop->Start();
  return h;
}

struct Overhead {
  int width;
  double p50_us, p99_us, share, step_ms;
};

absl::StatusOr<Overhead> MeasureOverhead(const std::string& dir, int threads, int width,
                                         int steps) {
  ASSIGN_OR_RETURN(auto h, MakeHarness(dir, threads, width, std::max(512, width * 16)));
  for (int i = 0; i < width; ++i)
    RETURN_IF_ERROR(h->loop->Submit(h->MakeSequence(16, 100000, i, nullptr)));
  // Wait until every sequence decodes (no prefill left).
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  while (absl::Now() < deadline) {
    const decode::WorkerStats s = h->loop->Stats();
    if (s.running == width && s.pending_prefill_tokens == 0 && s.waiting == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<StepObservation> samples;
  kvcache::PrefixCacheEvents events;
  bool reset;
  h->loop->TakeReport(false, &samples, &events, &reset);
  std::vector<double> host_us, share, step_ms;
  while (static_cast<int>(host_us.size()) < steps && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    h->loop->TakeReport(false, &samples, &events, &reset);
    for (const auto& s : samples) {
      if (s.num_decode != width || s.num_prefill_tokens != 0) continue;
      host_us.push_back(s.host_ms * 1e3);
      share.push_back(s.host_ms / s.duration_ms);
      step_ms.push_back(s.duration_ms);
    }
  }
  h->loop->Stop();
  return Overhead{width, Percentile(host_us, 50), Percentile(host_us, 99), Median(share),
                  Median(step_ms)};
}

// Static batch (seed 000's batched-bench regime): the engine alone, `width` requests started
// together, prefilled in one step and decoded in lockstep for `tokens` tokens; `rounds`
// times. The same work per request as the continuous run (16-token prompt, 64 tokens out on
// average), so the ratio isolates the cost of continuous arrivals and completions.
absl::StatusOr<double> StaticTokensPerSecond(const std::string& dir, int threads, int width,
                                             int tokens, int rounds) {
  ASSIGN_OR_RETURN(auto model,
                   engine::LoadModel(dir, engine::EngineOptions{.num_threads = threads}));
  const int blocks_per_seq = (16 + tokens + 16) / 16;
  KvLayout layout = model.model->MakeKvLayout(width * blocks_per_seq, 16, DType::kF32);
  ASSIGN_OR_RETURN(auto pool, kvcache::KvPool::Allocate(layout));
  std::vector<std::vector<int32_t>> tables(width);
  for (int s = 0; s < width; ++s) {
    tables[s].resize(blocks_per_seq);
    std::iota(tables[s].begin(), tables[s].end(), s * blocks_per_seq);
  }
  engine::PackedBatch batch;
  engine::Logits logits;
  engine::SamplerScratch scratch;
  text::SamplingConfig greedy;
  greedy.temperature = 0;
  std::vector<int32_t> next(width);
  const absl::Time start = absl::Now();
  for (int round = 0; round < rounds; ++round) {
    batch.Clear();
    std::vector<std::vector<int32_t>> prompts(width, std::vector<int32_t>(16, 1 + round));
    for (int s = 0; s < width; ++s) batch.Add(prompts[s], 0, tables[s], true);
    RETURN_IF_ERROR(model.model->Forward(batch, *pool, {}, &logits));
    for (int s = 0; s < width; ++s)
      next[s] = engine::SampleToken(logits.Row(s), greedy, 16, &scratch);
    for (int step = 1; step < tokens; ++step) {
      batch.Clear();
      for (int s = 0; s < width; ++s)
        batch.Add(absl::MakeConstSpan(&next[s], 1), 15 + step, tables[s], true);
      RETURN_IF_ERROR(model.model->Forward(batch, *pool, {}, &logits));
      for (int s = 0; s < width; ++s)
        next[s] = engine::SampleToken(logits.Row(s), greedy, 16 + step, &scratch);
    }
  }
  return static_cast<double>(width) * tokens * rounds / absl::ToDoubleSeconds(absl::Now() - start);
}

// Continuous serving: closed-loop clients keep `width` requests in flight; each asks for
// 32-96 tokens, so requests arrive and finish every few steps and their prefills mix in.
absl::StatusOr<double> ContinuousTokensPerSecond(const std::string& dir, int threads, int width,
                                                 absl::Duration duration) {
  ASSIGN_OR_RETURN(auto h, MakeHarness(dir, threads, width, 512));
  std::atomic<uint32_t> seed{1000};
  Harness* raw = h.get();
  std::function<void()> submit_one;
  std::atomic<bool> running{true};
  submit_one = [&] {
    if (!running.load()) return;
    const int max_tokens = 32 + static_cast<int>(seed.load() * 2654435761u % 65);
    raw->loop->Submit(raw->MakeSequence(16, max_tokens, seed.fetch_add(1), [&] { submit_one(); }))
        .IgnoreError();
  };
  for (int i = 0; i < width; ++i) submit_one();
  absl::SleepFor(absl::Seconds(1));  // Warm up.
  const int64_t start_tokens = h->tokens.load();
  const absl::Time start = absl::Now();
  absl::SleepFor(duration);
  const double tps = (h->tokens.load() - start_tokens) / absl::ToDoubleSeconds(absl::Now() - start);
  running.store(false);
  h->loop->Stop();
  return tps;
}

}  // namespace

absl::Status RunDecodeBench(const DecodeBenchConfig& input) {
  DecodeBenchConfig cfg = input;
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.model_dir.empty()) {
    cfg.model_dir = "models/small";
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("small"));
    RETURN_IF_ERROR(tools::EnsureModel(spec, cfg.model_dir));
  }
  Table table({"metric", "running", "p50", "p99", "share of step", "step"});
  nlohmann::json summary = {
      {"bench", "decode"}, {"model", cfg.model_dir}, {"machine", MachineInfo()}};
  for (int width : cfg.widths) {
    Progress("decode", absl::StrCat("scheduling overhead with ", width, " running sequences"));
    ASSIGN_OR_RETURN(Overhead o, MeasureOverhead(cfg.model_dir, cfg.threads, width, cfg.steps));
    table.AddRow({"host overhead per step", absl::StrCat(width), Fixed(o.p50_us, 1) + " us",
                  Fixed(o.p99_us, 1) + " us", Fixed(100 * o.share, 3) + " %",
                  Fixed(o.step_ms) + " ms"});
    summary[absl::StrCat("sched_overhead_p50_us_", width)] = o.p50_us;
    summary[absl::StrCat("sched_overhead_p99_us_", width)] = o.p99_us;
    summary[absl::StrCat("sched_overhead_share_", width)] = o.share;
    summary[absl::StrCat("step_ms_", width)] = o.step_ms;
  }
  Progress("decode", absl::StrCat("static batch of ", cfg.continuous_width));
  ASSIGN_OR_RETURN(double static_tps,
                   StaticTokensPerSecond(cfg.model_dir, cfg.threads, cfg.continuous_width, 64, 3));
  Progress("decode", absl::StrCat("continuous serving at width ", cfg.continuous_width));
  ASSIGN_OR_RETURN(double continuous_tps,
                   ContinuousTokensPerSecond(cfg.model_dir, cfg.threads, cfg.continuous_width,
                                             cfg.continuous_duration));
  table.AddRow({"static batch tokens/s", absl::StrCat(cfg.continuous_width), Fixed(static_tps, 1),
                "", "", ""});
  table.AddRow({"continuous tokens/s", absl::StrCat(cfg.continuous_width), Fixed(continuous_tps, 1),
                "", Fixed(continuous_tps / static_tps) + "x static", ""});
  summary["static_tokens_per_s"] = static_tps;
  summary["continuous_tokens_per_s"] = continuous_tps;
  summary["continuous_over_static"] = continuous_tps / static_tps;
  std::printf("%s", table.ToString().c_str());
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf("summary: %s/summary.json\n", cfg.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::bench
