// Per-client admission: the share of the cluster one client may hold. Admission against global
// caps alone is first come, first served, so one client holding thousands of streams once kept
// every other client out (RESOURCE_EXHAUSTED for all of them while its streams sat in the
// decode workers' queues). Each client (client_identity.h says who that is) may have in flight
// at most max_share of the cluster's request slots (every accepting decode worker's running
// plus waiting slots), and never fewer than min_requests; past that it gets RESOURCE_EXHAUSTED
// with a retry-after while other clients are admitted. A client alone can still fill the
// decode batches (with the default share of one half, the running slots), only not queue
// beyond them; the decode workers then take waiting requests client by client
// (decode_worker/scheduler.h), so an admitted request does not wait behind a greedy client's.
// Memory is bounded by the requests in flight: a client's entry goes with its last request.
// Thread-safety: thread-safe.
#ifndef PDSERVE_ROUTER_CLIENT_ADMISSION_H_
#define PDSERVE_ROUTER_CLIENT_ADMISSION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "router/counts_by_key.h"

namespace pdserve::router {

struct ClientAdmissionConfig {
  // The share of the cluster's request slots one client may hold (0, 1]; 1 lets one client
  // take them all (no per-client limit). Default 0.5.
  double max_share = 0.5;
  // Requests any client may have in flight whatever the share. Default 4.
  int min_requests = 4;
  // The retry-after hint with the refusal. Default 200 ms.
  absl::Duration retry_after = absl::Milliseconds(200);

  // INVALID_ARGUMENT naming the flag (--client_max_share, --client_min_requests).
  absl::Status Validate() const;
};

class ClientAdmission {
 public:
  // One admitted request; gives its place back when destroyed (or on Release()).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }

    void Release();
    const std::string& client() const { return client_; }

   private:
    friend class ClientAdmission;
    Ticket(ClientAdmission* owner, std::string client)
        : owner_(owner), client_(std::move(client)) {}
    ClientAdmission* owner_ = nullptr;
    std::string client_;
  };

  explicit ClientAdmission(const ClientAdmissionConfig& config) : config_(config) {}

  // Admits one request of `client` with the cluster holding `cluster_slots` requests now, or
  // RESOURCE_EXHAUSTED (with retry-after) naming the client's limit.
  absl::StatusOr<Ticket> Admit(absl::string_view client, int64_t cluster_slots);
  // What one client may hold when the cluster holds `cluster_slots`.
  int64_t Limit(int64_t cluster_slots) const;

  int InFlight(absl::string_view client) const { return in_flight_.Get(client); }
  // Clients with requests in flight.
  int ActiveClients() const { return in_flight_.keys(); }
  // The `n` clients with the most requests in flight, most first (ties by name).
  std::vector<std::pair<std::string, int>> Busiest(int n) const { return in_flight_.Largest(n); }

 private:
  void Release(const std::string& client) { in_flight_.Remove(client); }

  const ClientAdmissionConfig config_;
  CountsByKey in_flight_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_CLIENT_ADMISSION_H_
