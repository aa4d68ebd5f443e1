#include "router/client_identity.h"

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/hash.h"

namespace pdserve::router {
namespace {

absl::string_view Metadata(const grpc::ServerContextBase& context, absl::string_view name) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(name.data(), name.size()));
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace

std::string RandomFrontSecret() {
  std::random_device device;  // /dev/urandom on Linux.
  std::string out;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&out, "%08x", device());
  return out;
}

std::string ClientName(absl::string_view kind, absl::string_view value) {
  bool printable = value.size() <= kMaxClientNameBytes;
  for (char c : value) printable = printable && absl::ascii_isgraph(static_cast<unsigned char>(c));
  if (printable) return absl::StrCat(kind, ":", value);
  return absl::StrFormat("%s:#%016x", kind, Xxh64(value));
}

std::string ClientFromPeer(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    return ClientName("addr", peer.substr(0, colon));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    // "[addr]:port"
    if (absl::ConsumePrefix(&peer, "[")) peer = peer.substr(0, peer.find(']'));
    return ClientName("addr", peer);
  }
  if (absl::StartsWith(peer, "unix:")) return "addr:unix";
  return ClientName("peer", peer);
}

std::string ResolveClient(const grpc::ServerContextBase& context,
                          const ClientIdentityConfig& config) {
  if (!config.front_secret.empty() &&
      Metadata(context, kFrontSecretHeader) == config.front_secret) {
    const absl::string_view front_client = Metadata(context, kFrontClientHeader);
    if (!front_client.empty()) return std::string(front_client);  // Resolved by the front.
  }
  if (!config.header.empty()) {
    const absl::string_view named = Metadata(context, config.header);
    if (!named.empty()) return ClientName("id", named);
  }
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    const std::vector<grpc::string_ref> identity = auth->GetPeerIdentity();
    if (!identity.empty())
      return ClientName("cert", absl::string_view(identity[0].data(), identity[0].size()));
  }
  return ClientFromPeer(context.peer());
}

}  // namespace pdserve::router
