#include "common/metrics_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"

#ifndef PDSERVE_VERSION
#define PDSERVE_VERSION "dev"
#endif

namespace pdserve {
namespace {

constexpr int kMetricsThreads = 4;
constexpr absl::Duration kMetricsRequestTimeout = absl::Seconds(2);

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen_address, std::shared_ptr<prometheus::Registry> registry,
    const std::string& component, const std::map<std::string, std::string>& build_info) {
  ASSIGN_OR_RETURN(HostPort host_port, ParseHostPort(listen_address, "metrics address"));
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->registry_ = std::move(registry);
  prometheus::BuildGauge()
      .Name("pdserve_build_info")
      .Help("Build information; the value is always 1.")
      .Register(*server->registry_)
      .Add([&] {
        std::map<std::string, std::string> labels = build_info;
        labels["version"] = PDSERVE_VERSION;
        labels["component"] = component;
        return labels;
      }())
      .Set(1);
  try {
    // Each connection holds a civetweb thread until its request is read or times out. With
    // one thread and civetweb's 30 s default, a single idle connection blinded /metrics for
    // 30 s; now a silent connection is dropped after 2 s and a few may idle at once.
    server->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", host_port.ToString(), "num_threads", std::to_string(kMetricsThreads),
        "request_timeout_ms", std::to_string(absl::ToInt64Milliseconds(kMetricsRequestTimeout))});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen_address, ": ", e.what()));
  }
  server->exposer_->RegisterCollectable(server->registry_);
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::InternalError("metrics: exposer reports no listening port");
  server->port_ = ports.front();
  server->address_ = WithPort(host_port, server->port_);
  return server;
}

MetricsServer::~MetricsServer() {
  if (exposer_ == nullptr) return;
  // civetweb's master thread polls its listening socket with a fixed 2 s timeout and only
  // then notices mg_stop(), so a plain destruction blocks ~2 s. Connecting to the socket
  // while it stops wakes the poll at once.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* target = nullptr;
  auto host_port = ParseHostPort(address_, "metrics address");
  if (!host_port.ok() ||
      getaddrinfo(host_port->host.c_str(), std::to_string(port_).c_str(), &hints, &target) != 0) {
    exposer_.reset();
    return;
  }
  std::atomic<bool> stopped{false};
  std::thread waker([target, &stopped] {
    while (!stopped.load()) {
      const int fd = ::socket(target->ai_family, SOCK_STREAM, 0);
      ::connect(fd, target->ai_addr, target->ai_addrlen);
      ::close(fd);
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  exposer_.reset();
  stopped.store(true);
  waker.join();
  freeaddrinfo(target);
}

}  // namespace pdserve
