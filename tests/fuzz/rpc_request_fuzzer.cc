// libFuzzer target: what every pdserve RPC does with its request before touching a worker.
// The first byte picks the request type, the rest is parsed as that protobuf message; a
// message that parses goes through the same validation and state changes the service would
// apply. Nothing may crash, hang or leak; refusals are statuses.
//   0 Generation.Generate   router pre-check, then validation with tokenization
//   1 Decode.Generate       the decode worker's validation of the embedded request
//   2 Prefill.Prefill       JobFromRequest (tokens, sampling, KV target, positions)
//   3 Registry.Connect      registration, load report and prefix events into a registry
//   4 Registry.GetClusterStatus and Prefill.CancelPrefill: parsing only
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/decode.pb.h"
#include "pdserve/v1/prefill.pb.h"
#include "pdserve/v1/registry.pb.h"
#include "prefill_worker/prefill_service.h"
#include "prometheus/registry.h"
#include "router/cost_model.h"
#include "router/router_metrics.h"
#include "router/router_wire.h"
#include "router/worker_registry.h"
#include "text/byte_level.h"
#include "text/tokenizer.h"
#include "wire/report_bridge.h"
#include "wire/request_bridge.h"

namespace {

constexpr int kVocab = 300;

// A byte-level tokenizer whose vocabulary is the 256 byte symbols plus a few merges and one
// special token: every input text encodes.
const pdserve::text::Tokenizer& TestTokenizer() {
  static const pdserve::text::Tokenizer* tokenizer = [] {
    const auto& alphabet = pdserve::text::ByteLevelAlphabet::Get();
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[alphabet.Encode(static_cast<uint8_t>(b))] = b;
    vocab["th"] = 256;
    vocab["the"] = 257;
    nlohmann::json root = {
        {"added_tokens", {{{"id", 299}, {"content", "<|eot|>"}, {"special", true}}}},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"t h", "th e"}}}}};
    auto t = pdserve::text::Tokenizer::FromJson(root.dump());
    if (!t.ok()) __builtin_trap();
    return t->release();
  }();
  return *tokenizer;
}

pdserve::wire::ModelLimits Limits() {
  pdserve::wire::ModelLimits limits;
  limits.model_name = "fuzz";
  limits.vocab_size = kVocab;
  limits.max_context_tokens = 4096;
  limits.max_sequence_tokens = 2048;
  limits.max_prompt_bytes = 1 << 16;
  return limits;
}

void Generate(const pdserve::v1::GenerateRequest& r) {
  const pdserve::wire::ModelLimits limits = Limits();
  if (!pdserve::wire::PrecheckGenerateRequest(r, limits).ok()) return;
  pdserve::wire::ValidateGenerateRequest(r, limits, &TestTokenizer()).IgnoreError();
}

void Registry(const pdserve::v1::WorkerMessage& first, const std::string& rest) {
  static prometheus::Registry* prometheus = new prometheus::Registry();
  static pdserve::router::RouterMetrics* metrics = new pdserve::router::RouterMetrics(*prometheus);
  pdserve::FakeClock clock;
  pdserve::router::CostModel cost_model{pdserve::CostModelParams()};
  pdserve::router::WorkerRegistry registry(&clock, absl::Seconds(2), &cost_model, metrics);
  if (!first.has_registration()) return;
  // What RegistryService does: the wire converted once, then the domain registry.
  auto info = pdserve::wire::RegistrationFromProto(first.registration());
  if (!info.ok()) return;
  auto session = registry.Register(*info);
  if (!session.ok()) return;
  pdserve::v1::WorkerMessage next;
  if (next.ParseFromString(rest)) {
    if (next.has_load()) registry.Report(*session, pdserve::wire::ReportFromProto(next.load()));
    if (next.has_prefix_cache()) {
      registry.ApplyPrefix(*session, pdserve::router::PrefixUpdateFromProto(next.prefix_cache()));
    }
  }
  pdserve::v1::ClusterStatus status;
  for (const auto& w : registry.Status()) {
    pdserve::router::WorkerStatusToProto(w, status.add_workers());
  }
  clock.Advance(absl::Seconds(5));
  registry.ExpireSilent();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: {
      pdserve::v1::GenerateRequest r;
      if (r.ParseFromString(body)) Generate(r);
      break;
    }
    case 1: {
      pdserve::v1::DecodeRequest r;
      if (r.ParseFromString(body)) {
        Generate(r.request());
        absl::FromUnixNanos(r.arrival_unix_nanos());
      }
      break;
    }
    case 2: {
      pdserve::v1::PrefillRequest r;
      if (r.ParseFromString(body)) {
        pdserve::prefill::JobFromRequest(r, kVocab, absl::Now() + absl::Seconds(1)).IgnoreError();
      }
      break;
    }
    case 3: {
      // Two messages: a registration, then whatever follows (split at the first byte's value).
      const size_t split = body.empty() ? 0 : static_cast<uint8_t>(body[0]) % (body.size() + 1);
      pdserve::v1::WorkerMessage first;
      if (first.ParseFromString(body.substr(0, split))) Registry(first, body.substr(split));
      break;
    }
    default: {
      pdserve::v1::ClusterStatusRequest status;
      status.ParseFromString(body);
      pdserve::v1::CancelPrefillRequest cancel;
      cancel.ParseFromString(body);
      break;
    }
  }
  return 0;
}
