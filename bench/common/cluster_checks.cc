#include "bench/common/cluster_checks.h"

#include <cstdint>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "server/grpc_security.h"
#include "tools/client/generation_client.h"

namespace pdserve::bench {
namespace {

// Log lines that mean a process is broken (as the fault suite's check).
constexpr const char* kReports[] = {"ERROR: AddressSanitizer",
                                    "runtime error:",
                                    "WARNING: ThreadSanitizer",
                                    "Assertion `",
                                    "pure virtual method called",
                                    "terminate called",
                                    "Check failed:",
                                    "assertion failed:"};

}  // namespace

v1::DecodeStats FetchDecodeStats(const std::string& address, const GrpcSecurity& security) {
  absl::StatusOr<v1::DecodeStats> stats =
      client::FetchDecodeStats(client::MakeChannel(address, security));
  if (stats.ok()) return *std::move(stats);
  v1::DecodeStats unreachable;
  unreachable.set_running(UINT32_MAX);  // Never at baseline.
  return unreachable;
}

nlohmann::json DecodeStatsJson(const v1::DecodeStats& s) {
  return {{"running", s.running()},
          {"waiting", s.waiting()},
          {"awaiting_kv", s.awaiting_kv()},
          {"in_use", s.blocks().in_use()},
          {"reserved", s.blocks().reserved_for_transfer()},
          {"quarantined", s.blocks().quarantined()},
          {"preemptions", s.preemptions_total()}};
}

std::vector<std::string> BrokenProcessReports(const std::string& log_text) {
  std::vector<std::string> found;
  for (const char* r : kReports) {
    if (absl::StrContains(log_text, r)) found.push_back(r);
  }
  return found;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void OutcomeTally::Add(const std::string& kind, grpc::StatusCode code, bool expected,
                       const std::string& message) {
  absl::MutexLock lock(&mu_);
  ++counts_[kind][CodeName(code)];
  if (!expected) {
    ++unexpected_;
    if (examples_.size() < 10)
      examples_.push_back(absl::StrCat(kind, ": ", CodeName(code), " ", message));
  }
}

nlohmann::json OutcomeTally::ToJson() const {
  absl::MutexLock lock(&mu_);
  return nlohmann::json{{"counts", counts_}, {"unexpected", unexpected_}, {"examples", examples_}};
}

int OutcomeTally::unexpected() const {
  absl::MutexLock lock(&mu_);
  return unexpected_;
}

std::map<std::string, std::map<std::string, int>> OutcomeTally::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

int OutcomeTally::total() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [kind, codes] : counts_) {
    for (const auto& [code, count] : codes) n += count;
  }
  return n;
}

Table OutcomeTally::ToTable() const {
  Table table({"kind", "outcome", "requests"});
  for (const auto& [kind, codes] : counts()) {
    for (const auto& [code, n] : codes) table.AddRow({kind, code, absl::StrCat(n)});
  }
  return table;
}

std::string OutcomeTally::CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    default:
      return absl::StrCat("code_", static_cast<int>(code));
  }
}

}  // namespace pdserve::bench
