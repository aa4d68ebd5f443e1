#include "bench/transfer/transfer_bench.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "server/child_process.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Progress;
using measure::WriteSummary;
namespace {

constexpr const char* kModes[] = {"layerwise", "bulk"};

// One offloaded request, as the client and the final message saw it (ms).
struct Sample {
  double client_ttft = 0;
  double ttft = 0;  // At the decode worker: arrival until the first token left.
  double queue = 0;
  double compute = 0;
  double tail = 0;
  double transfer = 0;
  double decode_start = 0;  // ttft minus queue, compute and tail: RPCs, admission, emission.
};

struct ModeResult {
  std::vector<Sample> samples;
  double Median(double Sample::*field) const {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(s.*field);
    return measure::Median(v);
  }
  double Max(double Sample::*field) const {
    double m = 0;
    for (const Sample& s : samples) m = std::max(m, s.*field);
    return m;
  }
};

absl::StatusOr<ModelConfig> ReadConfig(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  if (!in) return absl::NotFoundError(absl::StrCat(dir, "/config.json: cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  return ModelConfig::FromJson(text.str());
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartWorker(const std::string& binary,
                                                          std::vector<std::string> args) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<ChildProcess> child,
      ChildProcess::Start(ChildOptions{
          .binary = binary, .args = std::move(args), .startup_timeout = absl::Minutes(5)}));
  if (absl::Status s = child->WaitHealthy(absl::Minutes(2)); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat(binary, " did not become healthy: ", s.message(), "\n", child->Log()));
  }
  return child;
}

absl::StatusOr<Sample> Offload(const std::shared_ptr<grpc::Channel>& decode,
                               const std::string& prefill_address,
                               const std::vector<int32_t>& prompt) {
  v1::DecodeRequest r;
  *r.mutable_request() = client::MakeRequest(prompt, 1);
  r.mutable_request()->mutable_sampling()->set_ignore_eos(true);
  v1::PrefillWorkerRef* ref = r.add_prefill_workers();
  ref->set_worker_id("bench-prefill");
  ref->set_address(prefill_address);
  const client::GenerationOutcome out = client::CallDecode(decode, r, absl::Minutes(5));
  if (!out.status.ok()) {
    return absl::InternalError(absl::StrCat("Decode.Generate: ", out.status.error_message()));
  }
  const v1::GenerateResult& res = out.result;
  if (res.placement().mode() != v1::PLACEMENT_MODE_OFFLOAD ||
      res.placement().fell_back_to_local()) {
    return absl::InternalError(
        absl::StrCat("the request was not offloaded: ", res.placement().fallback_cause()));
  }
  Sample s;
  s.client_ttft =
      out.token_times.empty() ? 0 : absl::ToDoubleMilliseconds(out.token_times[0] - out.start);
  s.ttft = res.timings().ttft_ms();
  s.queue = res.timings().prefill_queue_ms();
  s.compute = res.timings().prefill_ms();
  s.tail = res.timings().transfer_tail_ms();
  s.transfer = res.timings().transfer_ms();
  s.decode_start = std::max(0.0, s.ttft - s.queue - s.compute - s.tail);
  return s;
}

}  // namespace

absl::Status RunTransferBench(const TransferBenchConfig& input) {
  TransferBenchConfig cfg = input;
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.repetitions < 1) return absl::InvalidArgumentError("--repetitions: must be >= 1");
  std::string dir = cfg.model_dir;
  if (dir.empty()) {
    dir = "models/small";
    Progress("transfer", "no --model: using the small preset at " + dir);
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("small"));
    RETURN_IF_ERROR(tools::EnsureModel(spec, dir));
  }
  ASSIGN_OR_RETURN(ModelConfig model, ReadConfig(dir));
  const int longest = *std::max_element(cfg.prompt_lengths.begin(), cfg.prompt_lengths.end());
  if (longest + 2 > model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--prompt_lengths: ", longest,
                                                   " does not fit the model's context of ",
                                                   model.max_position_embeddings));
  }
  const int block_size = 16;
  const int blocks = (longest + 32) / block_size + 8;
  const int64_t kv_bytes_per_token = int64_t{model.num_layers} * 2 * model.num_kv_heads *
                                     model.head_dim * static_cast<int64_t>(sizeof(float));
  const int64_t prefill_pool = (int64_t{longest} + 64) * kv_bytes_per_token + (int64_t{64} << 20);
  std::vector<std::string> ucx = {"--ucx_transports=" + cfg.transport, "--backend=" + cfg.backend};
  if (cfg.transport == "tcp") ucx.push_back("--ucx_net_devices=lo");
  const std::string threads = absl::StrCat("--threads=", cfg.prefill_threads);

  Progress("transfer",
           "starting a decode worker and two prefill workers (layerwise, bulk) over UCX " +
               cfg.transport);
  std::vector<std::string> decode_args = {"--model=" + dir, "--threads=1",
                                          absl::StrCat("--num_blocks=", blocks),
                                          "--prefix_caching=false", "--log_level=warning"};
  decode_args.insert(decode_args.end(), ucx.begin(), ucx.end());
  ASSIGN_OR_RETURN(auto decode, StartWorker("pdserve-decode", decode_args));
  std::unique_ptr<ChildProcess> prefill[2];
  for (int m = 0; m < 2; ++m) {
    std::vector<std::string> args = {"--model=" + dir,
                                     threads,
                                     absl::StrCat("--transfer_mode=", kModes[m]),
                                     absl::StrCat("--kv_cache_bytes=", prefill_pool),
                                     absl::StrCat("--max_batch_tokens=", longest),
                                     "--log_level=warning"};
    args.insert(args.end(), ucx.begin(), ucx.end());
    ASSIGN_OR_RETURN(prefill[m], StartWorker("pdserve-prefill", args));
  }
  const auto channel = client::MakeChannel(decode->grpc_address(), GrpcSecurity());

  std::mt19937 rng(2026);
  auto prompt_of = [&](int length) {
    std::vector<int32_t> p(length);
    for (auto& t : p) t = static_cast<int32_t>(rng() % model.vocab_size);
    return p;
  };
  // Warm-up: connections, endpoints, first-touch of both pools.
  for (int m = 0; m < 2; ++m) {
    ASSIGN_OR_RETURN(Sample ignored, Offload(channel, prefill[m]->grpc_address(), prompt_of(256)));
    (void)ignored;
  }

  nlohmann::json summary;
  summary["machine"] = MachineInfo();
  summary["model"] = {{"dir", dir},
                      {"layers", model.num_layers},
                      {"kv_heads", model.num_kv_heads},
                      {"head_dim", model.head_dim},
                      {"kv_bytes_per_token", kv_bytes_per_token}};
  summary["transport"] = cfg.transport;
  summary["backend"] = cfg.backend;
  Table table({"P", "mode", "TTFT", "queue", "compute", "tail", "decode start", "one layer",
               "tail/layer", "TTFT/compute"});
  nlohmann::json runs = nlohmann::json::array();
  for (int length : cfg.prompt_lengths) {
    // More repetitions for short prompts (cheap, and their sub-millisecond tails are at the
    // mercy of thread wake-ups), fewer for the longest (their compute dominates the run).
    const int reps = length <= 1024   ? 3 * cfg.repetitions
                     : length >= 8192 ? std::max(1, cfg.repetitions / 3)
                                      : cfg.repetitions;
    ModeResult results[2];
    for (int rep = 0; rep < reps; ++rep) {
      for (int m = 0; m < 2; ++m) {  // Side by side: layerwise then bulk, every repetition.
        ASSIGN_OR_RETURN(Sample s, Offload(channel, prefill[m]->grpc_address(), prompt_of(length)));
        Progress("transfer", absl::StrCat("P=", length, " ", kModes[m], ": TTFT ", Fixed(s.ttft, 1),
                                          " ms, compute ", Fixed(s.compute, 1), " ms, tail ",
                                          Fixed(s.tail, 2), " ms"));
        results[m].samples.push_back(s);
      }
    }
    const ModeResult& lw = results[0];
    const ModeResult& bulk = results[1];
    // Sending one layer: the bulk variant sends every layer after the forward, so its tail
    // divided by the layer count is the measured per-layer send time at this length.
    const double one_layer = bulk.Median(&Sample::tail) / model.num_layers;
    // Prefill compute without any transfer overlapping it: the bulk variant's forward.
    const double compute = bulk.Median(&Sample::compute);
    const double tail_over_layer = one_layer > 0 ? lw.Median(&Sample::tail) / one_layer : 0;
    const double ttft_over_compute = compute > 0 ? lw.Median(&Sample::ttft) / compute : 0;
    const double bulk_over_lw_tail =
        lw.Median(&Sample::tail) > 0 ? bulk.Median(&Sample::tail) / lw.Median(&Sample::tail) : 0;
    summary[absl::StrCat("tail_over_one_layer_", length)] = tail_over_layer;
    summary[absl::StrCat("offload_ttft_over_prefill_compute_", length)] = ttft_over_compute;
    summary[absl::StrCat("bulk_tail_over_layerwise_tail_", length)] = bulk_over_lw_tail;
    summary[absl::StrCat("one_layer_ms_", length)] = one_layer;
    for (int m = 0; m < 2; ++m) {
      const ModeResult& r = results[m];
      nlohmann::json samples = nlohmann::json::array();
      for (const Sample& s : r.samples) {
        samples.push_back({{"client_ttft_ms", s.client_ttft},
                           {"ttft_ms", s.ttft},
                           {"queue_ms", s.queue},
                           {"compute_ms", s.compute},
                           {"tail_ms", s.tail},
                           {"transfer_ms", s.transfer},
                           {"decode_start_ms", s.decode_start}});
      }
      runs.push_back({{"prompt_tokens", length},
                      {"mode", kModes[m]},
                      {"samples", samples},
                      {"median_ttft_ms", r.Median(&Sample::ttft)},
                      {"median_compute_ms", r.Median(&Sample::compute)},
                      {"median_tail_ms", r.Median(&Sample::tail)},
                      {"max_tail_ms", r.Max(&Sample::tail)}});
      table.AddRow({absl::StrCat(length), kModes[m], Fixed(r.Median(&Sample::ttft), 1),
                    Fixed(r.Median(&Sample::queue), 2), Fixed(r.Median(&Sample::compute), 1),
                    Fixed(r.Median(&Sample::tail), 2), Fixed(r.Median(&Sample::decode_start), 2),
                    m == 0 ? Fixed(one_layer, 2) : "",
                    Fixed(one_layer > 0 ? r.Median(&Sample::tail) / one_layer : 0, 2),
                    Fixed(compute > 0 ? r.Median(&Sample::ttft) / compute : 0, 3)});
    }
  }
  summary["runs"] = runs;
  bool tail_ok = true;
  bool ttft_ok = true;
  for (int length : cfg.prompt_lengths) {
    tail_ok &= summary[absl::StrCat("tail_over_one_layer_", length)].get<double>() <= 2.0;
    if (length >= 2048)
      ttft_ok &=
          summary[absl::StrCat("offload_ttft_over_prefill_compute_", length)].get<double>() <= 1.05;
  }
  summary["targets"] = {{"tail_over_one_layer_max", 2.0},
                        {"offload_ttft_over_prefill_compute_max", 1.05},
                        {"tail_met", tail_ok},
                        {"ttft_met", ttft_ok}};
  std::printf("pdserve-bench transfer (%s, UCX %s; times in ms, medians)\n%s", dir.c_str(),
              cfg.transport.c_str(), table.ToString().c_str());
  std::printf(
      "targets: transfer tail <= 2x one layer: %s; offloaded TTFT <= 1.05x prefill compute at P >= "
      "2048: %s\n",
      tail_ok ? "met" : "NOT met", ttft_ok ? "met" : "NOT met");
  return WriteSummary(cfg.out_dir, summary);
}

}  // namespace pdserve::bench
