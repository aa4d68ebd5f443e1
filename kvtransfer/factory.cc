#include "kvtransfer/factory.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {

absl::Status KvTransportConfig::Validate() const {
  if (kind != "ucx") {
    return absl::InvalidArgumentError(
        absl::StrCat("kv transport kind: '", kind, "' is not one of ucx"));
  }
  return ucx.Validate();
}

absl::StatusOr<std::unique_ptr<KvTransport>> MakeKvTransport(const KvTransportConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  return MakeUcxTransport(config.ucx);
}

}  // namespace pdserve::kvtransfer
