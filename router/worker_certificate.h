// A worker's id proved by its TLS client certificate. With --worker_id_uri_prefix=P (say
// "spiffe://pdserve/worker/"), a worker registers as id X only over a connection whose
// verified client certificate carries the URI SAN P+X. The registration token and the
// cluster's CA say "one of ours"; this says which one: a process holding the token, or any
// certificate from the CA (a client's, another worker's), cannot take a worker's id, not even
// while that worker is away. Certificates per worker are what cert-manager's csi-driver issues
// per pod (a URI SAN with the pod's name) and what the chaos bench issues per process.
// Thread-safety: pure functions.
#ifndef PDSERVE_ROUTER_WORKER_CERTIFICATE_H_
#define PDSERVE_ROUTER_WORKER_CERTIFICATE_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pdserve::router {

// The URI SANs of the peer's verified certificate (gRPC's "peer_uri" and "peer_spiffe_id"
// properties); empty without TLS or without a client certificate.
std::vector<std::string> PeerCertificateUris(const grpc::AuthContext& auth);

// OK when `uris` hold `prefix` + `worker_id`; PERMISSION_DENIED naming the id, the URI it
// needs and the URIs the certificate has otherwise.
absl::Status CheckWorkerIdCertificate(absl::string_view worker_id, absl::string_view prefix,
                                      const std::vector<std::string>& uris);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_WORKER_CERTIFICATE_H_
