// pdctl's commands: up (start a local cluster described by cluster.yaml, detached, and wait
// until every worker has registered), status (workers, load, KV usage, recent placement
// decisions, supervision events), generate (stream one completion, then its placement and
// timings), down, and supervise (up --supervise: restart what exits).
// Thread-safety: each command runs alone in the pdctl process.
#ifndef PDSERVE_TOOLS_PDCTL_COMMANDS_H_
#define PDSERVE_TOOLS_PDCTL_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/grpc_security.h"
#include "tools/pdctl/supervisor.h"

namespace pdserve::pdctl {

// With `supervision`, a detached `pdctl supervise` watches the cluster and starts again what
// exits (supervisor.h).
absl::Status Up(const std::string& config_path, std::ostream& out,
                const std::optional<SupervisionPolicy>& supervision = std::nullopt);
// The supervisor's loop (`pdctl supervise`, started by `up --supervise`).
// `security`: how to reach the processes (--tls_* flags: a TLS cluster).
absl::Status Supervise(const std::string& run_dir, const SupervisionPolicy& policy,
                       const GrpcSecurity& security);
// `router` overrides the address recorded by `up` in `run_dir`.
absl::Status Status(const std::string& run_dir, const std::string& router, int decisions,
                    const GrpcSecurity& security, std::ostream& out);

struct GenerateOptions {
  std::string run_dir;
  std::string router;     // Overrides the recorded address.
  GrpcSecurity security;  // How to reach the router (--tls_*); plaintext by default.
  std::string prompt;
  std::vector<uint32_t> token_ids;  // Used when prompt is empty.
  std::string model;
  std::string request_id;
  int max_tokens = 64;
  float temperature = 0;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  // The request's objectives (GenerateRequest.objectives): a router class, its own TTFT and
  // TPOT in ms (0: unset).
  std::string slo_class;
  double ttft_ms = 0;
  double tpot_ms = 0;
  absl::Duration timeout = absl::Minutes(5);
  bool quiet = false;  // No completion text, only the placement and timings.
};
// The completion's text streams to `text`; the placement and timings go to `info`.
absl::Status Generate(const GenerateOptions& options, std::ostream& text, std::ostream& info);

absl::Status Down(const std::string& run_dir, absl::Duration grace, std::ostream& out);

// Asks the router to switch worker `worker_id` to `role` ("decode" or "prefill"). The token is
// read from `token_file`, else from the run directory of the cluster `up` started, if any.
absl::Status SwitchRole(const std::string& run_dir, const std::string& router,
                        const std::string& token_file, const GrpcSecurity& security,
                        const std::string& worker_id, const std::string& role, std::ostream& out);

}  // namespace pdserve::pdctl

#endif  // PDSERVE_TOOLS_PDCTL_COMMANDS_H_
