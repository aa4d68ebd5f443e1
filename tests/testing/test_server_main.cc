// pdserve-test-server: a server process with only the shared lifecycle (health, reflection,
// /metrics, serving-info file, SIGTERM drain). Used by the tests of that lifecycle and of the
// child-process utility.
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/logging.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "server/server_runner.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC listen address, host:port.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0", "/metrics address; empty disables.");
ABSL_FLAG(std::string, serving_info_path, "", "Write the bound addresses here.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(5), "Drain timeout on SIGTERM.");
ABSL_FLAG(absl::Duration, ready_delay, absl::ZeroDuration(),
          "How long to stay NOT_SERVING before going SERVING.");

int main(int argc, char** argv) {
  pdserve::ShutdownSignal shutdown;
  pdserve::ParseCommandLine(argc, argv,
                            "pdserve-test-server: lifecycle-only server for tests.\n"
                            "Usage: pdserve-test-server [--listen=HOST:PORT] ...");
  pdserve::ServerRunnerConfig config;
  config.grpc.listen_address = absl::GetFlag(FLAGS_listen);
  config.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  config.serving_info_path = absl::GetFlag(FLAGS_serving_info_path);
  config.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("pdserve_test_server_starts_total")
      .Help("Times this test server started.")
      .Register(*registry)
      .Add({})
      .Increment();
  auto runner = pdserve::ServerRunner::Start(config, {}, {}, registry, "test-server");
  if (!runner.ok()) {
    PDS_LOG(ERROR) << runner.status();
    return 1;
  }
  if (shutdown.WaitUntil(absl::Now() + absl::GetFlag(FLAGS_ready_delay)) < 0) {
    (*runner)->SetServing(true);
  }
  (*runner)->RunUntilShutdown(shutdown, {});
  return 0;
}
