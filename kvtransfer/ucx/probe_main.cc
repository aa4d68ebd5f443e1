// pdserve-kv-probe: unpacks a peer's UCX worker address and packed remote key in a process of
// its own, so that bytes UCX cannot parse crash this process rather than the worker that
// received them (kvtransfer/ucx/peer_address_check.h). Exit status: 0 accepted, 2 bad flags,
// 3 UCX rejected the address, 4 UCX rejected the rkey, 5 UCX could not start; a signal means
// UCX crashed on the bytes.
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "kvtransfer/descriptor_codec.h"

ABSL_FLAG(std::string, address_hex, "", "The peer's UCX worker address, hex.");
ABSL_FLAG(std::string, rkey_hex, "", "The peer's packed remote key, hex; empty: none.");
ABSL_FLAG(std::string, transports, "", "UCX transports (as UCX_TLS); empty: UCX default.");
ABSL_FLAG(std::string, net_devices, "", "UCX network devices (as UCX_NET_DEVICES).");

namespace {

constexpr int kAccepted = 0;
constexpr int kBadFlags = 2;
constexpr int kAddressRejected = 3;
constexpr int kRkeyRejected = 4;
constexpr int kUcxFailed = 5;

int Fail(int code, const char* what, ucs_status_t status) {
  std::fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ParseCommandLine(
      argc, argv,
      "pdserve-kv-probe: checks that UCX can unpack a peer's worker address and rkey.\n"
      "Usage: pdserve-kv-probe --address_hex=HEX [--rkey_hex=HEX] [--transports=...]");
  auto address = pdserve::kvtransfer::FromHex(absl::GetFlag(FLAGS_address_hex));
  auto rkey = pdserve::kvtransfer::FromHex(absl::GetFlag(FLAGS_rkey_hex));
  if (!address.ok() || address->empty() || !rkey.ok()) {
    std::fprintf(stderr, "--address_hex and --rkey_hex must be hex (the address non-empty)\n");
    return kBadFlags;
  }
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
    return Fail(kUcxFailed, "config", s);
  const std::string transports = absl::GetFlag(FLAGS_transports);
  const std::string devices = absl::GetFlag(FLAGS_net_devices);
  if (!transports.empty()) ucp_config_modify(config, "TLS", transports.c_str());
  if (!devices.empty()) ucp_config_modify(config, "NET_DEVICES", devices.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
  ucp_context_h context = nullptr;
  ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) return Fail(kUcxFailed, "init", status);
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  if (status = ucp_worker_create(context, &worker_params, &worker); status != UCS_OK) {
    return Fail(kUcxFailed, "worker", status);
  }
  // The same call the transport makes; the endpoint is never used. Everything is left to
  // process exit: a probe that got this far has answered.
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(address->data());
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucp_ep_h ep = nullptr;
  if (status = ucp_ep_create(worker, &ep_params, &ep); status != UCS_OK) {
    return Fail(kAddressRejected, "address", status);
  }
  if (!rkey->empty()) {
    ucp_rkey_h unpacked = nullptr;
    if (status = ucp_ep_rkey_unpack(ep, rkey->data(), &unpacked); status != UCS_OK) {
      return Fail(kRkeyRejected, "rkey", status);
    }
  }
  std::fflush(stderr);
  _exit(kAccepted);
}
