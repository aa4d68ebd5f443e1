// pdserve-bench fleet: the control plane at scale on real processes. One pdserve-router and
// N emulated decode workers (--backend=emulated: real processes, a GPU profile's timing;
// docs/emulated.md) on this machine: how long all N take to register, what an idle worker
// and the router hold (RSS) and burn (CPU) with every worker reporting, placement decision
// latency among N live workers (the router's own decision records), the relay's overhead on
// inter-token latency (through the router vs straight to a worker), and how fast a SIGKILLed
// worker leaves the registry while requests keep arriving.
#ifndef PDSERVE_BENCH_FLEET_FLEET_BENCH_H_
#define PDSERVE_BENCH_FLEET_FLEET_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pdserve::bench {

struct FleetBenchConfig {
  std::string out_dir;
  // Model directory for the router and the workers (config and tokenizer); empty: Llama 3
  // 8B's shape without weights in models/llama3-8b-emulated (made on first use).
  std::string model_dir;
  // The workers' performance profile.
  std::string profile = "deploy/profiles/h100-llama3-8b.json";
  int decode_workers = 256;
  // How long the idle footprint is sampled over.
  absl::Duration idle_window = absl::Seconds(30);
  // Requests placed (concurrently) for the decision latency; each prompt 100-3,600 tokens.
  int decisions = 2000;  // The router's records hold the newest 1,000.
  int concurrency = 8;
  // Relay: rounds x streams x tokens each way.
  int relay_rounds = 4;
  int relay_streams = 4;
  int relay_tokens = 64;
  // CPUs for the router alone (empty: unpinned), and for everything else: the workers and
  // this benchmark's own load generator. A router with cores of its own is how it runs in a
  // deployment (its own pod); on a small machine, 256 workers' wake-ups otherwise preempt it
  // mid-decision and the decision latency measures the oversubscription.
  std::vector<int> router_cpus;
  std::vector<int> worker_cpus;
};

absl::Status RunFleetBench(const FleetBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_FLEET_FLEET_BENCH_H_
