// The TLS flags every pdserve process and client tool takes (--tls_cert, --tls_key, --tls_ca,
// --tls_require_client_cert, --tls_server_name, --tls_reload_interval), defined once.
// Thread-safety: call from main() after ParseCommandLine.
#ifndef PDSERVE_SERVER_TLS_FLAGS_H_
#define PDSERVE_SERVER_TLS_FLAGS_H_

#include "server/grpc_security.h"

namespace pdserve {

// The flags as a config (validated later, by GrpcSecurity::FromConfig or TlsConfig::Validate).
TlsConfig TlsConfigFromFlags();

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TLS_FLAGS_H_
