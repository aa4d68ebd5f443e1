// Serves a prometheus-cpp registry over HTTP at /metrics (the prometheus-cpp pull exposer).
// Every pdserve process owns one registry and one MetricsServer; components declare their
// metric families once, in a *Metrics struct built from that registry.
// Thread-safety: the exposer serves from its own threads; the object itself is immutable.
#ifndef PDSERVE_COMMON_METRICS_SERVER_H_
#define PDSERVE_COMMON_METRICS_SERVER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace pdserve {

class MetricsServer {
 public:
  // Binds `listen_address` (host:port; port 0 picks a free port) and serves `registry` at
  // /metrics. Also registers pdserve_build_info{version,component} = 1.
  // pdserve_build_info carries `component`, the version and `build_info` (more labels, e.g. a
  // worker's engine backend and instruction set).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen_address, std::shared_ptr<prometheus::Registry> registry,
      const std::string& component, const std::map<std::string, std::string>& build_info = {});
  ~MetricsServer();

  // The bound address, host:port, with the real port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
  int port_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_METRICS_SERVER_H_
