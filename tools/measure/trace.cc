#include "tools/measure/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace pdserve::measure {
namespace {

constexpr int kMooncakeBlockTokens = 512;

// SplitMix64: a small, well-mixed generator; one per block id, so a block's tokens depend
// on nothing else.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void AppendTokens(uint64_t key, int count, int first_token, int vocab, std::vector<int32_t>* out) {
  uint64_t state = Mix(key);
  const uint64_t span = static_cast<uint64_t>(vocab - first_token);
  for (int i = 0; i < count; ++i) {
    state = Mix(state);
    out->push_back(first_token + static_cast<int32_t>(state % span));
  }
}

absl::Status LineError(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

void SortByArrival(Trace* trace) {
  std::stable_sort(
      trace->requests.begin(), trace->requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
}

}  // namespace

double Trace::duration_s() const {
  if (requests.size() < 2) return 0;
  return requests.back().arrival_s - requests.front().arrival_s;
}

double Trace::rate() const {
  const double d = duration_s();
  return d > 0 ? static_cast<double>(requests.size()) / d : 0;
}

absl::StatusOr<Trace> ParseAzureCsv(absl::string_view text) {
  Trace trace;
  trace.format = "azure";
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  if (lines.empty()) return absl::InvalidArgumentError("azure trace: empty");
  std::vector<std::string> header = absl::StrSplit(absl::StripAsciiWhitespace(lines[0]), ',');
  int time_col = -1, context_col = -1, generated_col = -1;
  for (int i = 0; i < static_cast<int>(header.size()); ++i) {
    if (header[i] == "TIMESTAMP") time_col = i;
    if (header[i] == "ContextTokens") context_col = i;
    if (header[i] == "GeneratedTokens") generated_col = i;
  }
  if (time_col < 0 || context_col < 0 || generated_col < 0) {
    return LineError(1, "header lacks TIMESTAMP, ContextTokens or GeneratedTokens");
  }
  const int columns = static_cast<int>(header.size());
  absl::Time first;
  for (size_t n = 1; n < lines.size(); ++n) {
    const int line = static_cast<int>(n) + 1;
    std::vector<absl::string_view> cells =
        absl::StrSplit(absl::StripAsciiWhitespace(lines[n]), ',');
    if (static_cast<int>(cells.size()) != columns) {
      return LineError(line, absl::StrCat(cells.size(), " fields, the header has ", columns));
    }
    absl::Time when;
    std::string error;
    if (!absl::ParseTime("%Y-%m-%d %H:%M:%E*S", cells[time_col], absl::UTCTimeZone(), &when,
                         &error)) {
      return LineError(line, absl::StrCat("TIMESTAMP '", cells[time_col], "': ", error));
    }
    TraceRequest r;
    if (!absl::SimpleAtoi(cells[context_col], &r.input_tokens) || r.input_tokens < 1) {
      return LineError(
          line, absl::StrCat("ContextTokens '", cells[context_col], "' is not a positive integer"));
    }
    if (!absl::SimpleAtoi(cells[generated_col], &r.output_tokens) || r.output_tokens < 0) {
      return LineError(line, absl::StrCat("GeneratedTokens '", cells[generated_col],
                                          "' is not a non-negative integer"));
    }
    if (n == 1) first = when;
    r.arrival_s = absl::ToDoubleSeconds(when - first);
    trace.requests.push_back(std::move(r));
  }
  SortByArrival(&trace);
  if (!trace.requests.empty() && trace.requests.front().arrival_s < 0) {
    const double shift = trace.requests.front().arrival_s;
    for (TraceRequest& r : trace.requests) r.arrival_s -= shift;
  }
  return trace;
}

absl::StatusOr<Trace> ParseMooncakeJsonl(absl::string_view text) {
  Trace trace;
  trace.format = "mooncake";
  trace.block_tokens = kMooncakeBlockTokens;
  int line = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line;
    const absl::string_view stripped = absl::StripAsciiWhitespace(raw);
    if (stripped.empty()) continue;
    const nlohmann::json row = nlohmann::json::parse(stripped, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded() || !row.is_object()) return LineError(line, "not a JSON object");
    auto number = [&](const char* field, double* out) -> absl::Status {
      auto it = row.find(field);
      if (it == row.end() || !it->is_number() || it->get<double>() < 0) {
        return LineError(line, absl::StrCat("'", field, "' is missing or not a number >= 0"));
      }
      *out = it->get<double>();
      return absl::OkStatus();
    };
    double timestamp_ms = 0, input = 0, output = 0;
    if (absl::Status s = number("timestamp", &timestamp_ms); !s.ok()) return s;
    if (absl::Status s = number("input_length", &input); !s.ok()) return s;
    if (absl::Status s = number("output_length", &output); !s.ok()) return s;
    if (input < 1 || input > 1e9 || output > 1e9) {
      return LineError(line, "'input_length' must be >= 1 and lengths below 1e9");
    }
    TraceRequest r;
    r.arrival_s = timestamp_ms / 1000.0;
    r.input_tokens = static_cast<int>(input);
    r.output_tokens = static_cast<int>(output);
    if (auto it = row.find("hash_ids"); it != row.end()) {
      if (!it->is_array()) return LineError(line, "'hash_ids' is not an array");
      for (const nlohmann::json& id : *it) {
        if (!id.is_number_integer()) return LineError(line, "'hash_ids' holds a non-integer");
        r.prefix_blocks.push_back(id.get<int64_t>());
      }
      const size_t blocks = (r.input_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens;
      if (r.prefix_blocks.size() > blocks) {
        return LineError(
            line, absl::StrCat("'hash_ids' has ", r.prefix_blocks.size(), " blocks, more than ",
                               blocks, " of 512 tokens in ", r.input_tokens, " input tokens"));
      }
    }
    trace.requests.push_back(std::move(r));
  }
  if (trace.requests.empty()) return absl::InvalidArgumentError("mooncake trace: no requests");
  SortByArrival(&trace);
  return trace;
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("trace: cannot read '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const absl::string_view start = absl::StripLeadingAsciiWhitespace(text);
  absl::StatusOr<Trace> trace =
      !start.empty() && start.front() == '{' ? ParseMooncakeJsonl(text) : ParseAzureCsv(text);
  if (!trace.ok()) {
    return absl::Status(trace.status().code(),
                        absl::StrCat("trace '", path, "': ", trace.status().message()));
  }
  return trace;
}

absl::StatusOr<Trace> SelectFromTrace(const Trace& trace, const TraceSelection& s) {
  if (!(s.start_s >= 0)) return absl::InvalidArgumentError("trace start: must be >= 0 s");
  if (!(s.duration_s >= 0)) return absl::InvalidArgumentError("trace duration: must be >= 0 s");
  if (!(s.rate_scale > 0 && s.rate_scale <= 1e6)) {
    return absl::InvalidArgumentError("trace rate scale: must be in (0, 1e6]");
  }
  if (!(s.length_scale > 0 && s.length_scale <= 1e3)) {
    return absl::InvalidArgumentError("trace length scale: must be in (0, 1000]");
  }
  if (s.max_context < 0 || s.max_context == 1) {
    return absl::InvalidArgumentError("trace max context: must be 0 (none) or >= 2 tokens");
  }
  if (s.max_requests < 0) return absl::InvalidArgumentError("trace max requests: must be >= 0");
  Trace out;
  out.format = trace.format;
  out.block_tokens =
      trace.block_tokens > 0
          ? std::max(1, static_cast<int>(std::lround(trace.block_tokens * s.length_scale)))
          : 0;
  const double end = s.duration_s > 0 ? s.start_s + s.duration_s : HUGE_VAL;
  std::vector<double> arrivals(trace.requests.size());
  for (size_t i = 0; i < arrivals.size(); ++i) arrivals[i] = trace.requests[i].arrival_s;
  if (s.spread_ties && arrivals.size() > 1) {
    const double mean_gap = trace.duration_s() / static_cast<double>(arrivals.size() - 1);
    for (size_t i = 0; i < arrivals.size();) {
      size_t j = i;
      while (j < arrivals.size() && trace.requests[j].arrival_s == trace.requests[i].arrival_s) ++j;
      const double next = j < arrivals.size() ? trace.requests[j].arrival_s
                                              : trace.requests[i].arrival_s + mean_gap * (j - i);
      for (size_t k = i; k < j; ++k) {
        arrivals[k] = trace.requests[i].arrival_s + (next - trace.requests[i].arrival_s) *
                                                        static_cast<double>(k - i) /
                                                        static_cast<double>(j - i);
      }
      i = j;
    }
  }
  auto scaled = [&](int tokens, int at_least) {
    return std::max(at_least, static_cast<int>(std::lround(tokens * s.length_scale)));
  };
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& in = trace.requests[i];
    if (arrivals[i] < s.start_s || arrivals[i] >= end) continue;
    if (s.max_requests > 0 && static_cast<int>(out.requests.size()) >= s.max_requests) break;
    TraceRequest r;
    r.arrival_s = (arrivals[i] - s.start_s) / s.rate_scale;
    r.input_tokens = scaled(in.input_tokens, 1);
    r.output_tokens = scaled(in.output_tokens, 1);
    if (s.max_context > 0 && r.input_tokens + r.output_tokens > s.max_context) {
      r.output_tokens = std::min(r.output_tokens, s.max_context - 1);
      r.input_tokens = s.max_context - r.output_tokens;
    }
    if (out.block_tokens > 0) {
      const size_t blocks = (r.input_tokens + out.block_tokens - 1) / out.block_tokens;
      r.prefix_blocks.assign(in.prefix_blocks.begin(),
                             in.prefix_blocks.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                            blocks, in.prefix_blocks.size())));
    }
    out.requests.push_back(std::move(r));
  }
  return out;
}

std::vector<int32_t> PromptTokens(const Trace& trace, size_t index, int vocab, uint64_t seed,
                                  int first_token) {
  std::vector<int32_t> tokens;
  if (index >= trace.requests.size() || vocab < 2) return tokens;
  if (first_token >= vocab || first_token < 0) first_token = 0;
  const TraceRequest& r = trace.requests[index];
  tokens.reserve(r.input_tokens);
  for (size_t b = 0; b < r.prefix_blocks.size() && trace.block_tokens > 0; ++b) {
    const int count =
        std::min(trace.block_tokens, r.input_tokens - static_cast<int>(tokens.size()));
    if (count <= 0) break;
    // Keyed by the id alone (and the seed): the same block in any request, at any length.
    AppendTokens(Mix(seed) ^ Mix(static_cast<uint64_t>(r.prefix_blocks[b]) * 2 + 1), count,
                 first_token, vocab, &tokens);
  }
  const int rest = r.input_tokens - static_cast<int>(tokens.size());
  if (rest > 0) {
    AppendTokens(Mix(seed + 0x5851F42D4C957F2Dull) ^ Mix(static_cast<uint64_t>(index) * 2), rest,
                 first_token, vocab, &tokens);
  }
  return tokens;
}

}  // namespace pdserve::measure
