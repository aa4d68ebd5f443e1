#include "router/worker_certificate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/client_identity.h"

namespace pdserve::router {

std::vector<std::string> PeerCertificateUris(const grpc::AuthContext& auth) {
  std::vector<std::string> uris;
  if (!auth.IsPeerAuthenticated()) return uris;
  for (const char* property : {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_SPIFFE_ID_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : auth.FindPropertyValues(property)) {
      std::string uri(value.data(), value.size());
      if (std::find(uris.begin(), uris.end(), uri) == uris.end()) uris.push_back(std::move(uri));
    }
  }
  return uris;
}

absl::Status CheckWorkerIdCertificate(absl::string_view worker_id, absl::string_view prefix,
                                      const std::vector<std::string>& uris) {
  const std::string needed = absl::StrCat(prefix, worker_id);
  if (std::find(uris.begin(), uris.end(), needed) != uris.end()) return absl::OkStatus();
  // What the certificate names, bounded: it came from the peer.
  std::vector<std::string> named;
  for (size_t i = 0; i < uris.size() && i < 4; ++i) named.push_back(ClientName("uri", uris[i]));
  return absl::PermissionDeniedError(
      absl::StrCat("registration: worker id '", worker_id,
                   "' is not named by the client certificate (needs "
                   "the URI SAN ",
                   needed, ", --worker_id_uri_prefix; the certificate names ",
                   named.empty() ? "no URI" : absl::StrJoin(named, ", "), ")"));
}

}  // namespace pdserve::router
