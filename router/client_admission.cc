#include "router/client_admission.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/retry_after.h"

namespace pdserve::router {

absl::Status ClientAdmissionConfig::Validate() const {
  if (!(max_share > 0 && max_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--client_max_share: ", max_share, " is not in (0, 1]"));
  }
  if (min_requests < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--client_min_requests: ", min_requests, " is below 1"));
  }
  return absl::OkStatus();
}

ClientAdmission::Ticket& ClientAdmission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    client_ = std::move(other.client_);
  }
  return *this;
}

void ClientAdmission::Ticket::Release() {
  if (owner_ == nullptr) return;
  std::exchange(owner_, nullptr)->Release(client_);
}

int64_t ClientAdmission::Limit(int64_t cluster_slots) const {
  if (config_.max_share >= 1) return INT64_MAX;
  const auto share = static_cast<int64_t>(std::floor(config_.max_share * cluster_slots));
  return std::max<int64_t>(config_.min_requests, share);
}

absl::StatusOr<ClientAdmission::Ticket> ClientAdmission::Admit(absl::string_view client,
                                                               int64_t cluster_slots) {
  const int64_t limit = Limit(cluster_slots);
  if (!in_flight_.TryAdd(client, limit)) {
    return WithRetryAfter(
        absl::ResourceExhaustedError(absl::StrCat(
            "client ", client, " has ", limit, " requests in flight, its share of the cluster (",
            config_.max_share, " of ", cluster_slots,
            " request slots; --client_max_share): others are admitted first")),
        config_.retry_after);
  }
  return Ticket(this, std::string(client));
}

}  // namespace pdserve::router
