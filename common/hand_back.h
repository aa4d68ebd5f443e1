// A request handed back: a decode worker leaving the decode role (a role switch) ends each
// request that has given its client nothing yet, and refuses new ones, with UNAVAILABLE and
// this mark, and the router places the request again elsewhere (router/relay_call.cc), so
// that the switch waits only for the streams that have started. Carried as structured data, a
// payload on the absl::Status inside a process and a trailer on the wire: callers never parse
// messages.
// Thread-safety: stateless.
#ifndef PDSERVE_COMMON_HAND_BACK_H_
#define PDSERVE_COMMON_HAND_BACK_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace pdserve {

// The gRPC trailer on a Decode.Generate call that ended handed back; its value is "1".
inline constexpr char kHandedBackTrailer[] = "pdserve-handed-back";
inline constexpr char kHandedBackPayloadUrl[] = "type.pdserve.dev/handed-back";

// UNAVAILABLE with `message`, marked handed back.
inline absl::Status HandedBackError(absl::string_view message) {
  absl::Status status = absl::UnavailableError(message);
  status.SetPayload(kHandedBackPayloadUrl, absl::Cord("1"));
  return status;
}

inline bool IsHandedBack(const absl::Status& status) {
  return status.GetPayload(kHandedBackPayloadUrl).has_value();
}

}  // namespace pdserve

#endif  // PDSERVE_COMMON_HAND_BACK_H_
