// Small simulator inputs the simulator's tests share: a fast round-number profile, a config
// over it, and Poisson arrivals of one prompt and output length.
#ifndef PDSERVE_TESTS_SIM_SIM_TEST_INPUTS_H_
#define PDSERVE_TESTS_SIM_SIM_TEST_INPUTS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/sim_profile.h"
#include "sim/sim_workload.h"
#include "sim/simulator.h"

namespace pdserve::sim::testing {

// A small model: 2 layers, 16 KV positions a block, fast round numbers.
inline SimProfile Profile() {
  SimProfile p;
  p.timing.step_intercept_ms = 10;
  p.timing.step_per_decode_ms = 1;
  p.timing.step_per_prefill_token_ms = 0.1;
  p.timing.step_per_attention_ms = 0;
  p.timing.step_per_prefill_attention_ms = 0;
  p.timing.prefill_overhead_ms = 5;
  p.timing.prefill_per_token_ms = 0.05;
  p.timing.prefill_per_token_squared_ms = 0;
  p.timing.transfer_latency_ms = 1;
  p.timing.transfer_bytes_per_ms = 1e6;
  p.shape.kv_layout.num_layers = 2;
  p.shape.kv_layout.num_kv_heads = 2;
  p.shape.kv_layout.head_dim = 16;
  p.shape.kv_layout.num_blocks = 512;
  p.shape.max_num_batched_tokens = 256;
  p.shape.max_context_tokens = 4096;
  return p;
}

inline SimConfig Config(const std::string& policy, int decode, int prefill) {
  SimConfig c;
  c.profile = Profile();
  c.policy.name = policy;
  c.decode_workers = decode;
  c.prefill_workers = prefill;
  c.rpc_ms = 0.5;
  return c;
}

inline std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 16 + (i * 7 + salt * 131) % 30000;
  return t;
}

inline std::vector<SimRequest> Poisson(int n, double rate, int prompt, int output) {
  std::vector<SimRequest> out;
  double t = 0;
  uint64_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    t += -std::log((static_cast<double>(x >> 11) + 0.5) / 9007199254740992.0) / rate;
    SimRequest r;
    r.arrival_s = t;
    r.prompt = Tokens(prompt + (i % 5) * 37, i);
    r.max_tokens = output;
    r.kind = "k";
    out.push_back(r);
  }
  return out;
}

}  // namespace pdserve::sim::testing

#endif  // PDSERVE_TESTS_SIM_SIM_TEST_INPUTS_H_
