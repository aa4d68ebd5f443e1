// pdserve-kv-test-sender: a sender process for the multi-process KV transfer tests. Writes
// deterministic data (kv_test_data.h) for `--layers` layers into the receiver described by
// --descriptor, then completes; or stops after --hold_after_layers layers and waits to be
// killed.
#include <cstdio>
#include <numeric>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "kvtransfer/descriptor_codec.h"
#include "kvtransfer/ucx/ucx_transport.h"
#include "tests/kvtransfer/kv_test_data.h"

ABSL_FLAG(std::string, descriptor, "", "Receiver descriptor, hex.");
ABSL_FLAG(uint64_t, token, 0, "Transfer token.");
ABSL_FLAG(std::vector<std::string>, blocks, {}, "Target block ids.");
ABSL_FLAG(uint64_t, seed, 1, "Data seed.");
ABSL_FLAG(int, layers, 4, "Layers to write.");
ABSL_FLAG(std::string, tls, "", "UCX transports.");
ABSL_FLAG(std::string, net_devices, "", "UCX network devices.");
ABSL_FLAG(absl::Duration, layer_delay, absl::ZeroDuration(), "Pause between layers.");
ABSL_FLAG(int, hold_after_layers, -1, "Stop after this many layers and sleep (to be killed).");
ABSL_FLAG(uint64_t, fingerprint, 0, "Model fingerprint to claim.");

namespace kv = pdserve::kvtransfer;

int main(int argc, char** argv) {
  pdserve::ParseCommandLine(argc, argv, "pdserve-kv-test-sender: KV transfer test sender.");
  auto bytes = kv::FromHex(absl::GetFlag(FLAGS_descriptor));
  if (!bytes.ok()) return 2;
  auto descriptor = kv::DecodeDescriptor(*bytes);
  if (!descriptor.ok()) {
    std::fprintf(stderr, "%s\n", std::string(descriptor.status().message()).c_str());
    return 2;
  }
  std::vector<int32_t> target;
  for (const std::string& b : absl::GetFlag(FLAGS_blocks)) {
    int v;
    if (!absl::SimpleAtoi(b, &v)) return 2;
    target.push_back(v);
  }
  kv::UcxTransportConfig config;
  config.transports = absl::GetFlag(FLAGS_tls);
  config.net_devices = absl::GetFlag(FLAGS_net_devices);
  auto transport = kv::UcxTransport::Create(config);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", std::string(transport.status().message()).c_str());
    return 1;
  }
  pdserve::KvLayout layout = descriptor->layout;
  layout.num_blocks = static_cast<int>(target.size()) * 2;
  auto source = (*transport)->CreatePool(layout);
  if (!source.ok()) return 1;
  // Source blocks: a shuffled subset, so some runs coalesce and some do not.
  std::vector<int32_t> source_blocks(layout.num_blocks);
  std::iota(source_blocks.begin(), source_blocks.end(), 0);
  std::mt19937 rng(static_cast<uint32_t>(absl::GetFlag(FLAGS_seed)));
  std::shuffle(source_blocks.begin(), source_blocks.end(), rng);
  source_blocks.resize(target.size());
  const int layers = absl::GetFlag(FLAGS_layers);
  kv::testing::FillSource(static_cast<uint8_t*>((*source)->base()), layout, source_blocks, layers,
                          absl::GetFlag(FLAGS_seed));
  {
    auto out = (*transport)
                   ->Open(kv::TransferTarget{*descriptor, absl::GetFlag(FLAGS_token), target},
                          source->get(), absl::GetFlag(FLAGS_fingerprint));
    if (!out.ok()) {
      std::fprintf(stderr, "open: %s\n", std::string(out.status().message()).c_str());
      return 1;
    }
    const absl::Time start = absl::Now();
    for (int l = 0; l < layers; ++l) {
      if (l == absl::GetFlag(FLAGS_hold_after_layers)) {
        std::fprintf(stderr, "holding after %d layers\n", l);
        std::fflush(stderr);
        while (true) absl::SleepFor(absl::Seconds(1));
      }
      if (absl::Status s = (*out)->WriteLayer(l, source_blocks); !s.ok()) {
        std::fprintf(stderr, "write: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      if (absl::GetFlag(FLAGS_layer_delay) > absl::ZeroDuration())
        absl::SleepFor(absl::GetFlag(FLAGS_layer_delay));
    }
    if (absl::Status s = (*out)->Finish(absl::Seconds(30)); !s.ok()) {
      std::fprintf(stderr, "finish: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf(
        "sent %lu bytes via %s in %.2f ms\n", static_cast<unsigned long>((*out)->bytes_written()),
        kv::DataPathName((*out)->data_path()), absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  source->reset();
  return 0;
}
