#include "kvtransfer/factory.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {

absl::Status KvTransportConfig::Validate() const {
  if (kind != "ucx") {
    return absl::InvalidArgumentError(
        absl::StrCat("kv transport kind: '", kind, "' is not one of ucx"));
  }
  RETURN_IF_ERROR(link.Validate());
  return ucx.Validate();
}

absl::StatusOr<std::unique_ptr<KvTransport>> MakeKvTransport(const KvTransportConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(std::unique_ptr<KvTransport> ucx, MakeUcxTransport(config.ucx));
  if (!config.link.enabled()) return ucx;
  return std::unique_ptr<KvTransport>(new PacedTransport(std::move(ucx), config.link));
}

}  // namespace pdserve::kvtransfer
