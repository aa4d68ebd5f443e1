// What a benchmark that injects faults checks (soak, chaos): each decode worker back at
// baseline (nothing running or waiting, no block in use, reserved for a transfer or
// quarantined), process logs free of failed assertions and sanitizer reports, and a tally of
// request outcomes by kind with those the kind does not allow.
// Thread-safety: OutcomeTally is thread-safe; the functions are.
#ifndef PDSERVE_BENCH_COMMON_CLUSTER_CHECKS_H_
#define PDSERVE_BENCH_COMMON_CLUSTER_CHECKS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/text_table.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/decode.pb.h"
#include "server/grpc_security.h"

namespace pdserve::bench {

// The decode worker's stats; `running` is UINT32_MAX when it does not answer.
v1::DecodeStats FetchDecodeStats(const std::string& address,
                                 const GrpcSecurity& security = GrpcSecurity());
nlohmann::json DecodeStatsJson(const v1::DecodeStats& stats);

// The marks of a broken process (failed assertions, sanitizer reports, fatal errors) found
// in a log's text.
std::vector<std::string> BrokenProcessReports(const std::string& log_text);
std::string ReadTextFile(const std::string& path);

class OutcomeTally {
 public:
  // `expected`: whether the request's kind allows this outcome; up to 10 examples of the
  // others are kept with `message`.
  void Add(const std::string& kind, grpc::StatusCode code, bool expected,
           const std::string& message);
  nlohmann::json ToJson() const;
  int unexpected() const;
  std::map<std::string, std::map<std::string, int>> counts() const;
  int total() const;
  // Requests by kind and outcome.
  Table ToTable() const;
  static std::string CodeName(grpc::StatusCode code);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::map<std::string, int>> counts_ ABSL_GUARDED_BY(mu_);
  int unexpected_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> examples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_COMMON_CLUSTER_CHECKS_H_
