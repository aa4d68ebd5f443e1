// pdserve-bench: pdserve's benchmarks, one subcommand each. Every subcommand prints progress
// on stderr, a table on stdout, and writes summary.json (plus per-run files) under --out.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "bench/engine/engine_bench.h"
#include "common/flags.h"

ABSL_FLAG(std::string, out, "", "Directory for summary.json and per-run results (required).");
ABSL_FLAG(std::string, model, "", "Model directory; empty uses the bench's default preset.");
ABSL_FLAG(std::vector<std::string>, threads, {}, "engine: thread counts to measure (default 1,all).");
ABSL_FLAG(int, decode_steps, 16, "engine: timed decode steps per batch size.");
ABSL_FLAG(int, prefill_repetitions, 3, "engine: repetitions per prefill length.");

namespace {

constexpr char kUsage[] =
    "pdserve-bench: benchmarks that print a table and write summary.json.\n"
    "Usage: pdserve-bench SUBCOMMAND --out=DIR [flags]\n"
    "Subcommands:\n"
    "  engine    decode step time by batch and prefill throughput vs bandwidth/sgemm floors";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args = pdserve::ParseCommandLine(argc, argv, kUsage);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string& command = args[1];
  if (command == "engine") {
    pdserve::bench::EngineBenchConfig config;
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.out_dir = absl::GetFlag(FLAGS_out);
    for (const std::string& t : absl::GetFlag(FLAGS_threads)) {
      int n;
      if (!absl::SimpleAtoi(t, &n) || n < 1) {
        std::fprintf(stderr, "--threads: '%s' is not a positive integer\n", t.c_str());
        return 2;
      }
      config.thread_counts.push_back(n);
    }
    config.decode_steps = absl::GetFlag(FLAGS_decode_steps);
    config.prefill_repetitions = absl::GetFlag(FLAGS_prefill_repetitions);
    const absl::Status status = pdserve::bench::RunEngineBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  std::fprintf(stderr, "unknown subcommand '%s'\n%s\n", command.c_str(), kUsage);
  return 2;
}
