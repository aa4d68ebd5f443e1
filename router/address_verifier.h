// Proof that a registration's address is the registering worker's: the router asks the
// address who answers there (WorkerIdentity.Identify) and accepts only the worker id and
// epoch the registration claims. So nobody registers an address that is not theirs (a
// black-hole address once held requests for 5-15 s each), and a live-looking holder of an id
// whose address no longer answers as it registered can be replaced (an impostor once kept a
// restarted worker out for as long as it kept reporting).
// Thread-safety: thread-safe; `done` runs on a gRPC thread, once.
#ifndef PDSERVE_ROUTER_ADDRESS_VERIFIER_H_
#define PDSERVE_ROUTER_ADDRESS_VERIFIER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/grpc_security.h"

namespace pdserve::router {

class AddressVerifier {
 public:
  // `timeout` bounds each question (an address that drops packets costs that long).
  AddressVerifier(GrpcSecurity security, absl::Duration timeout)
      : security_(std::move(security)), timeout_(timeout) {}

  // Asks `address`; `done` gets OK when it answers as (`worker_id`, `epoch`), else
  // FAILED_PRECONDITION saying what it answered or why it did not.
  void Verify(const std::string& address, const std::string& worker_id, uint64_t epoch,
              std::function<void(absl::Status)> done) const;

 private:
  const GrpcSecurity security_;
  const absl::Duration timeout_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_ADDRESS_VERIFIER_H_
