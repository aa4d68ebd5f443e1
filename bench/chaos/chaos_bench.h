// pdserve-bench chaos: a real cluster (router, two prefill and three decode workers on this
// host, supervised as `pdctl up --supervise` is) under continuous mixed traffic while a seeded
// random schedule of faults runs: SIGKILL of any process, the router included (the supervisor
// starts it again), and SIGSTOP/SIGCONT of any process for 1-10 s. The traffic draws from a
// pool of requests whose tokens were measured alone on the quiet cluster first: greedy and
// seeded sampling, short prompts served locally, long ones offloaded, follow-ups on a shared
// prefix, some cancelled. Invariants, checked on every request and at the end:
//  - every request ends OK or with a typed error (UNAVAILABLE, RESOURCE_EXHAUSTED,
//    DEADLINE_EXCEEDED; CANCELLED when the client cancelled) within its deadline;
//  - the tokens of every stream, completed or not, are a prefix of its solo reference, and a
//    completed one has all of them (no lost, duplicated or corrupted token: also the check
//    that no KV block was written into the wrong place);
//  - no process exits but those it killed (no abort), and no log has a failed assertion or a
//    sanitizer report;
//  - after the faults stop every process is up and registered, every decode worker's blocks
//    are back at baseline and the router relays nothing;
//  - some requests completed with KV from a prefill worker (a run whose offloads all fell
//    back would check nothing of the transfer path).
// Prints the fault schedule's counts and the outcome table, writes summary.json; the exit
// status says whether it passed. The fault's target role goes round (router, prefill,
// decode). With `netns` (root only) the cluster runs across hosts: each process on a network
// namespace of its own, mutual TLS between them, UCX over TCP on the hosts' interfaces, and
// the network is a fourth target in the round: a host partitioned for 1-10 s, or its link
// losing 1-5 % of its packets or limited to 100 Mbit/s (one direction or both) for 5-15 s.
// The cluster's processes are
// detached (as the supervisor starts them): a run interrupted with Ctrl-C leaves them up, and
// `pdctl down --run_dir=OUT/cluster` stops them; a run that ends stops them itself.
#ifndef PDSERVE_BENCH_CHAOS_CHAOS_BENCH_H_
#define PDSERVE_BENCH_CHAOS_CHAOS_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pdserve::bench {

struct ChaosBenchConfig {
  std::string out_dir;
  // Model directory; empty: the tiny preset in models/tiny.
  std::string model_dir;
  absl::Duration duration = absl::Seconds(60);
  int clients = 6;
  // A fault starts this long after the previous one ended.
  absl::Duration fault_interval = absl::Seconds(5);
  // Requests in the reference pool (a quarter each: short, long, seeded sampling, follow-ups).
  int pool = 48;
  // Each request's deadline.
  absl::Duration deadline = absl::Seconds(20);
  uint64_t seed = 7;
  // Across hosts (network namespaces; mTLS; link faults). Needs root.
  bool netns = false;
};

// FAILED_PRECONDITION (after writing summary.json) when an invariant was broken;
// UNIMPLEMENTED with `netns` on a machine that cannot make network namespaces.
absl::Status RunChaosBench(const ChaosBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_CHAOS_CHAOS_BENCH_H_
