#include "sim/workload_family.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pdserve::sim {
namespace {

constexpr std::array<const char*, 4> kPromptNames = {"short", "long", "bimodal", "heavytail"};
constexpr std::array<const char*, 3> kOutputNames = {"tiny", "medium", "long"};
constexpr std::array<const char*, 3> kSharingNames = {"none", "multiturn", "system"};
constexpr std::array<const char*, 2> kArrivalNames = {"poisson", "bursty"};

constexpr int kSystemPromptTokens = 1024;
constexpr int kSystemPrompts = 4;
// Bursty arrivals: gamma-distributed gaps with this coefficient of variation (Poisson's is 1).
constexpr double kBurstyCv = 3;

template <size_t N>
absl::StatusOr<int> IndexOf(const std::array<const char*, N>& names, absl::string_view name,
                            absl::string_view part) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<int>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("workload cell: ", part, " '", name,
                                                 "' is not one of ", absl::StrJoin(names, ", ")));
}

class Lengths {
 public:
  explicit Lengths(uint64_t seed) : rng_(seed) {}
  // A log-normal length around `median`, within [lo, hi].
  int LogNormal(double median, double sigma, int lo, int hi) {
    std::normal_distribution<double> z(0, 1);
    const double v = median * std::exp(sigma * z(rng_));
    return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
  }
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double Unit() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  int Prompt(PromptShape shape) {
    switch (shape) {
      case PromptShape::kShort:
        return LogNormal(180, 0.7, 16, 1024);
      case PromptShape::kLong:
        return LogNormal(3000, 0.5, 1024, 12000);
      case PromptShape::kBimodal:
        return Unit() < 0.75 ? Prompt(PromptShape::kShort) : Prompt(PromptShape::kLong);
      case PromptShape::kHeavyTail:
        return LogNormal(500, 1.5, 16, 32768);
    }
    return 1;
  }
  int Output(OutputShape shape) {
    switch (shape) {
      case OutputShape::kTiny:
        return Uniform(1, 16);
      case OutputShape::kMedium:
        return LogNormal(100, 0.5, 16, 400);
      case OutputShape::kLong:
        return LogNormal(1000, 0.3, 400, 2048);
    }
    return 1;
  }
  // A follow-up turn's new question.
  int Question() { return LogNormal(60, 0.6, 8, 512); }
  double Gap(Arrivals arrivals) {
    if (arrivals == Arrivals::kPoisson) return std::exponential_distribution<double>(1)(rng_);
    const double shape = 1 / (kBurstyCv * kBurstyCv);  // Mean shape * scale = 1.
    return std::gamma_distribution<double>(shape, 1 / shape)(rng_);
  }
  std::vector<int32_t> Tokens(int n, int vocab) {
    std::vector<int32_t> t(static_cast<size_t>(std::max(0, n)));
    for (int32_t& x : t) x = static_cast<int32_t>(rng_() % static_cast<uint64_t>(vocab));
    return t;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// A conversation that may take more turns.
struct OpenConversation {
  int last_request = 0;
  int context_tokens = 0;  // Prompt and output of every turn so far.
  int turns_left = 0;
};

}  // namespace

std::string WorkloadCell::Name() const {
  return absl::StrCat(
      kPromptNames[static_cast<int>(prompt)], "/", kOutputNames[static_cast<int>(output)], "/",
      kSharingNames[static_cast<int>(sharing)], "/", kArrivalNames[static_cast<int>(arrivals)]);
}

absl::StatusOr<WorkloadCell> ParseWorkloadCell(const std::string& name) {
  const std::vector<std::string> parts = absl::StrSplit(name, '/');
  if (parts.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload cell '", name, "': expected prompt/output/sharing/arrivals, e.g. ",
                     WorkloadCell{}.Name()));
  }
  WorkloadCell c;
  int i = 0;
  auto set = [&](auto& field, auto names, const char* part) -> absl::Status {
    absl::StatusOr<int> index = IndexOf(names, parts[i++], part);
    if (!index.ok()) return index.status();
    field = static_cast<std::remove_reference_t<decltype(field)>>(*index);
    return absl::OkStatus();
  };
  if (absl::Status s = set(c.prompt, kPromptNames, "prompt"); !s.ok()) return s;
  if (absl::Status s = set(c.output, kOutputNames, "output"); !s.ok()) return s;
  if (absl::Status s = set(c.sharing, kSharingNames, "sharing"); !s.ok()) return s;
  if (absl::Status s = set(c.arrivals, kArrivalNames, "arrivals"); !s.ok()) return s;
  return c;
}

std::vector<WorkloadCell> FullFamily() {
  std::vector<WorkloadCell> out;
  for (int p = 0; p < 4; ++p) {
    for (int o = 0; o < 3; ++o) {
      for (int s = 0; s < 3; ++s) {
        for (int a = 0; a < 2; ++a) {
          out.push_back(WorkloadCell{static_cast<PromptShape>(p), static_cast<OutputShape>(o),
                                     static_cast<Sharing>(s), static_cast<Arrivals>(a)});
        }
      }
    }
  }
  return out;
}

std::vector<WorkloadCell> SmokeFamily() {
  return {
      {PromptShape::kLong, OutputShape::kTiny, Sharing::kNone, Arrivals::kPoisson},
      {PromptShape::kShort, OutputShape::kMedium, Sharing::kMultiTurn, Arrivals::kPoisson},
      {PromptShape::kBimodal, OutputShape::kMedium, Sharing::kSystemPrompt, Arrivals::kBursty},
      {PromptShape::kHeavyTail, OutputShape::kLong, Sharing::kNone, Arrivals::kPoisson},
  };
}

std::vector<SimRequest> FamilyRequests(const WorkloadCell& cell, int count, uint64_t seed,
                                       int vocab, int max_context) {
  Lengths draw(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<std::vector<int32_t>> system_prompts;
  if (cell.sharing == Sharing::kSystemPrompt) {
    for (int i = 0; i < kSystemPrompts; ++i)
      system_prompts.push_back(draw.Tokens(kSystemPromptTokens, vocab));
  }
  const std::string kind = cell.Name();
  std::vector<SimRequest> out;
  std::vector<OpenConversation> open;
  double t = 0;
  for (int i = 0; i < count; ++i) {
    t += draw.Gap(cell.arrivals);
    SimRequest r;
    r.arrival_s = t;
    r.kind = kind;
    const int output = draw.Output(cell.output);
    r.max_tokens = output;
    if (cell.sharing == Sharing::kMultiTurn && !open.empty() && draw.Unit() < 0.5) {
      // A follow-up of an open conversation (sent once its last turn has ended).
      const size_t c = draw.rng()() % open.size();
      OpenConversation& conv = open[c];
      const int question = draw.Question();
      if (conv.context_tokens + question + output + 8 <= max_context) {
        r.follow_up_of = conv.last_request;
        r.prompt = draw.Tokens(question, vocab);
        conv.last_request = i;
        conv.context_tokens += question + output;
        if (--conv.turns_left == 0) open.erase(open.begin() + static_cast<long>(c));
        out.push_back(std::move(r));
        continue;
      }
      open.erase(open.begin() + static_cast<long>(c));  // Full: a new request instead.
    }
    const int room = max_context - output - 8;
    int length = std::min(draw.Prompt(cell.prompt), room);
    if (!system_prompts.empty()) {
      r.prompt = system_prompts[draw.rng()() % system_prompts.size()];
      length = std::max(1, std::min(length, room - kSystemPromptTokens));
    }
    const std::vector<int32_t> body = draw.Tokens(length, vocab);
    r.prompt.insert(r.prompt.end(), body.begin(), body.end());
    if (cell.sharing == Sharing::kMultiTurn) {
      open.push_back(OpenConversation{.last_request = i,
                                      .context_tokens = static_cast<int>(r.prompt.size()) + output,
                                      .turns_left = draw.Uniform(1, 3)});
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace pdserve::sim
