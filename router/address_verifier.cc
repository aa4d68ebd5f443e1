#include "router/address_verifier.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/grpc_channel.h"

namespace pdserve::router {

void AddressVerifier::Verify(const std::string& address, const std::string& worker_id,
                             uint64_t epoch, std::function<void(absl::Status)> done) const {
  struct Question {
    std::unique_ptr<v1::WorkerIdentity::Stub> stub;
    grpc::ClientContext context;
    v1::IdentifyRequest request;
    v1::IdentifyResponse response;
  };
  // A channel per question: registrations are rare, and a cache keyed by claimed addresses
  // would grow with every address anyone claims.
  auto q = std::make_shared<Question>();
  q->stub = v1::WorkerIdentity::NewStub(MakeChannel(address, security_));
  q->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  Question* raw = q.get();
  raw->stub->async()->Identify(
      &raw->context, &raw->request, &raw->response,
      [q = std::move(q), address, worker_id, epoch, done = std::move(done),
       timeout = timeout_](grpc::Status status) {
        const std::string who = absl::StrCat("worker '", worker_id, "' (epoch ", epoch, ")");
        if (!status.ok()) {
          done(absl::FailedPreconditionError(
              absl::StrCat("registration.grpc_address: ", address, " did not answer as ", who,
                           " within ", absl::FormatDuration(timeout), ": ", status.error_message(),
                           " (the router must reach each worker at the address it registers: "
                           "--advertise_host)")));
          return;
        }
        if (q->response.worker_id() != worker_id || q->response.epoch() != epoch) {
          done(absl::FailedPreconditionError(absl::StrCat(
              "registration.grpc_address: ", address, " is worker '", q->response.worker_id(),
              "' (epoch ", q->response.epoch(), "), not ", who)));
          return;
        }
        done(absl::OkStatus());
      });
}

}  // namespace pdserve::router
