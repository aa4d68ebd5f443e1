#include "bench/transfer/transfer_raw_bench.h"

#include <cstring>
#include <iostream>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "engine/cpu/aligned_buffer.h"
#include "kvtransfer/descriptor_codec.h"
#include "kvtransfer/ucx/ucx_transport.h"
#include "tools/measure/report.h"
#include "tools/measure/subprocess.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Median;
using measure::Progress;
using measure::RunCommand;
using measure::Subprocess;
using measure::WriteSummary;
namespace {

using kvtransfer::UcxTransport;

constexpr uint64_t kFingerprint = 0xBE4C4;

std::vector<std::pair<std::string, std::string>> UcxEnv(const std::string& transport) {
  std::vector<std::pair<std::string, std::string>> env = {{"UCX_TLS", transport}};
  if (transport == "tcp") env.emplace_back("UCX_NET_DEVICES", "lo");
  return env;
}

// ucx_perftest between two processes on this host; returns MB/s (2^20 bytes) for *_bw tests
// or the median latency in microseconds for *_lat tests.
absl::StatusOr<double> Perftest(const std::string& test, size_t size, int iterations,
                                const std::string& transport) {
  const int port = PickFreeLoopbackPort();
  const auto env = UcxEnv(transport);
  ASSIGN_OR_RETURN(auto server, Subprocess::Start({"ucx_perftest", "-p", absl::StrCat(port)}, env));
  absl::SleepFor(absl::Milliseconds(300));
  auto out = RunCommand(
      {"ucx_perftest", "127.0.0.1", "-p", absl::StrCat(port), "-t", test, "-s", absl::StrCat(size),
       "-n", absl::StrCat(iterations), "-w", absl::StrCat(std::max(10, iterations / 10))},
      env, absl::Seconds(120));
  server->Wait(absl::Seconds(5)).IgnoreError();
  if (!out.ok()) return out.status();
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    if (!absl::StartsWith(line, "Final:")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    // Final: iterations p50 avg overall bw_avg bw_overall rate_avg rate_overall
    double value = 0;
    const size_t column = absl::EndsWith(test, "_lat") ? 2 : 5;
    if (f.size() > column && absl::SimpleAtod(f[column], &value)) return value;
  }
  return absl::InternalError(absl::StrCat("ucx_perftest ", test, ": no Final line in: ", *out));
}

struct Sample {
  double sender_us;    // Sender: first write posted to Finish returned.
  double receiver_us;  // Sender's first write to the receiver seeing completion.
};

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Start(const TransferRawConfig& cfg,
                                                        const std::string& transport, DType dtype) {
    auto s = std::unique_ptr<Session>(new Session());
    kvtransfer::UcxTransportConfig ucx;
    ucx.transports = transport;
    if (transport == "tcp") ucx.net_devices = "lo";
    ASSIGN_OR_RETURN(s->transport_, UcxTransport::Create(ucx));
    s->layout_ = KvLayout{cfg.layers,     cfg.kv_heads, cfg.head_dim,
                          cfg.block_size, dtype,        cfg.tokens / cfg.block_size};
    ASSIGN_OR_RETURN(s->pool_, s->transport_->CreatePool(s->layout_));
    ASSIGN_OR_RETURN(auto d,
                     s->transport_->ServePool(s->pool_.get(), "bench-receiver", kFingerprint, 1));
    const std::string hex = kvtransfer::ToHex(kvtransfer::EncodeDescriptor(d));
    ASSIGN_OR_RETURN(s->sender_, Subprocess::Start(
                                     {cfg.self_path, "transfer-raw-sender", "--descriptor=" + hex,
                                      "--tls=" + transport,
                                      transport == "tcp" ? "--net_devices=lo" : "--net_devices="}));
    return s;
  }
  ~Session() {
    if (sender_) sender_->WriteLine("quit").IgnoreError();
    sender_.reset();
    pool_.reset();
    transport_.reset();
  }

  absl::StatusOr<Sample> Run(int layers, int blocks) {
    const uint64_t token = ++next_token_;
    std::vector<int32_t> ids(blocks);
    std::iota(ids.begin(), ids.end(), 0);
    ASSIGN_OR_RETURN(auto handle,
                     transport_->Expect(kvtransfer::TransferExpectation{token, ids, layers}));
    RETURN_IF_ERROR(sender_->WriteLine(absl::StrCat("xfer ", token, " ", layers, " ", blocks)));
    ASSIGN_OR_RETURN(std::string line, sender_->ReadLine(absl::Seconds(60)));
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() < 5 || f[0] != "done") return absl::InternalError("sender: " + line);
    int64_t start_ns, end_ns;
    if (!absl::SimpleAtoi(f[2], &start_ns) || !absl::SimpleAtoi(f[3], &end_ns))
      return absl::InternalError(line);
    path_ = f[4];
    RETURN_IF_ERROR(handle->Wait(absl::Seconds(30)));
    const double receiver_us = (absl::ToUnixNanos(handle->completed_at()) - start_ns) / 1e3;
    transport_->Release(token);
    return Sample{(end_ns - start_ns) / 1e3, receiver_us};
  }
  const KvLayout& layout() const { return layout_; }
  const std::string& path() const { return path_; }

 private:
  Session() = default;
  std::unique_ptr<UcxTransport> transport_;
  KvLayout layout_;
  std::unique_ptr<kvtransfer::LocalPool> pool_;
  std::unique_ptr<Subprocess> sender_;
  uint64_t next_token_ = 0;
  std::string path_;
};

double MemcpyGbps(size_t bytes, int repetitions) {
  engine::AlignedBuffer<char> src(bytes), dst(bytes);
  std::memset(src.data(), 3, bytes);
  double best = 0;
  for (int r = 0; r < repetitions; ++r) {
    const absl::Time start = absl::Now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::max(best, bytes / absl::ToDoubleSeconds(absl::Now() - start));
  }
  return best / 1e9;
}

}  // namespace

absl::Status RunTransferRawSender(const std::string& descriptor_hex, const std::string& transports,
                                  const std::string& net_devices) {
  ASSIGN_OR_RETURN(std::string bytes, kvtransfer::FromHex(descriptor_hex));
  ASSIGN_OR_RETURN(kvtransfer::KvPoolDescriptor d, kvtransfer::DecodeDescriptor(bytes));
  kvtransfer::UcxTransportConfig ucx;
  ucx.transports = transports;
  ucx.net_devices = net_devices;
  ASSIGN_OR_RETURN(auto transport, UcxTransport::Create(ucx));
  ASSIGN_OR_RETURN(auto source, transport->CreatePool(d.layout));
  std::memset(source->base(), 7, source->bytes());
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f[0] == "quit") break;
    uint64_t token;
    int layers, blocks;
    if (f.size() != 4 || !absl::SimpleAtoi(f[1], &token) || !absl::SimpleAtoi(f[2], &layers) ||
        !absl::SimpleAtoi(f[3], &blocks)) {
      std::cout << "error bad command" << std::endl;
      continue;
    }
    std::vector<int32_t> ids(blocks);
    std::iota(ids.begin(), ids.end(), 0);
    auto out =
        transport->Open(kvtransfer::TransferTarget{d, token, ids}, source.get(), kFingerprint);
    if (!out.ok()) {
      std::cout << "error " << out.status().message() << std::endl;
      continue;
    }
    const int64_t start = absl::ToUnixNanos(absl::Now());
    absl::Status s;
    for (int l = 0; l < layers && s.ok(); ++l) s = (*out)->WriteLayer(l, ids);
    if (s.ok()) s = (*out)->Finish(absl::Seconds(30));
    const int64_t end = absl::ToUnixNanos(absl::Now());
    if (!s.ok()) {
      std::cout << "error " << s.message() << std::endl;
      continue;
    }
    std::cout << "done " << token << " " << start << " " << end << " "
              << kvtransfer::DataPathName((*out)->data_path()) << std::endl;
  }
  source.reset();
  return absl::OkStatus();
}

absl::Status RunTransferRawBench(const TransferRawConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  Table table({"transport", "dtype", "case", "bytes/op", "ours", "perftest best", "ratio", "memcpy",
               "ratio"});
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json summary = {{"bench", "transfer-raw"}, {"machine", MachineInfo()}};
  for (const std::string& transport : cfg.transports) {
    for (DType dtype : cfg.dtypes) {
      Progress("transfer-raw", absl::StrCat(transport, " ", DTypeName(dtype), ": starting sender"));
      ASSIGN_OR_RETURN(auto session, Session::Start(cfg, transport, dtype));
      const KvLayout& l = session->layout();
      const int blocks = l.num_blocks;
      const size_t op_bytes = l.region_bytes() * blocks;  // One coalesced run per (layer, K|V).
      const size_t layer_bytes = 2 * op_bytes;
      const size_t whole_bytes = layer_bytes * l.num_layers;
      for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(session->Run(1, blocks).status());  // Warm up.
      std::vector<double> layer_us, layer_rx_us, whole_us, small_us, small_rx_us;
      for (int i = 0; i < cfg.layer_repetitions; ++i) {
        ASSIGN_OR_RETURN(Sample s, session->Run(1, blocks));
        layer_us.push_back(s.sender_us);
        layer_rx_us.push_back(s.receiver_us);
      }
      for (int i = 0; i < cfg.whole_repetitions; ++i) {
        ASSIGN_OR_RETURN(Sample s, session->Run(l.num_layers, blocks));
        whole_us.push_back(s.sender_us);
      }
      for (int i = 0; i < cfg.latency_repetitions; ++i) {
        ASSIGN_OR_RETURN(Sample s, session->Run(1, 1));
        small_us.push_back(s.sender_us);
        small_rx_us.push_back(s.receiver_us);
      }
      const double layer_gbps = layer_bytes / Median(layer_us) / 1e3;
      const double layer_rx_gbps = layer_bytes / Median(layer_rx_us) / 1e3;
      const double whole_gbps = whole_bytes / Median(whole_us) / 1e3;
      const double small_lat = Median(small_us);
      const double small_rx_lat = Median(small_rx_us);
      const double memcpy_layer = MemcpyGbps(layer_bytes, 20);
      const double memcpy_whole = MemcpyGbps(whole_bytes, 5);
      double perf_bw = 0, perf_lat = 0;
      std::string perf_bw_test, perf_lat_test;
      if (cfg.run_perftest) {
        for (const char* test : {"ucp_put_bw", "ucp_am_bw", "tag_bw"}) {
          auto mbps = Perftest(test, op_bytes, transport == "tcp" ? 300 : 2000, transport);
          if (!mbps.ok()) {
            Progress("transfer-raw", absl::StrCat(test, ": ", mbps.status().message()));
            continue;
          }
          const double gbps = *mbps * 1048576 / 1e9;
          Progress("transfer-raw", absl::StrCat("ucx_perftest ", test, " ", op_bytes, " B over ",
                                                transport, ": ", Fixed(gbps), " GB/s"));
          if (gbps > perf_bw) {
            perf_bw = gbps;
            perf_bw_test = test;
          }
        }
        for (const char* test : {"ucp_put_lat", "ucp_am_lat", "tag_lat"}) {
          auto us = Perftest(test, l.region_bytes() * 2, 2000, transport);
          if (!us.ok()) continue;
          if (perf_lat == 0 || *us < perf_lat) {
            perf_lat = *us;
            perf_lat_test = test;
          }
        }
      }
      const std::string label = absl::StrCat(transport, "/", DTypeName(dtype));
      Progress("transfer-raw", absl::StrCat(label, " via ", session->path(), ": layer ",
                                            Fixed(layer_gbps), " GB/s, whole ", Fixed(whole_gbps),
                                            " GB/s, small ", Fixed(small_lat, 1), " us"));
      auto ratio = [](double a, double b) { return b > 0 ? Fixed(a / b) : std::string("-"); };
      table.AddRow({transport, std::string(DTypeName(dtype)), "per layer (K+V)",
                    absl::StrCat(op_bytes), Fixed(layer_gbps) + " GB/s",
                    perf_bw_test.empty() ? "-" : Fixed(perf_bw) + " GB/s " + perf_bw_test,
                    ratio(layer_gbps, perf_bw), Fixed(memcpy_layer) + " GB/s",
                    ratio(layer_gbps, memcpy_layer)});
      table.AddRow({transport, std::string(DTypeName(dtype)), "per layer, at receiver",
                    absl::StrCat(op_bytes), Fixed(layer_rx_gbps) + " GB/s", "",
                    ratio(layer_rx_gbps, perf_bw), "", ""});
      table.AddRow({transport, std::string(DTypeName(dtype)),
                    absl::StrCat("whole (", l.num_layers, " layers)"), absl::StrCat(op_bytes),
                    Fixed(whole_gbps) + " GB/s", "", "", Fixed(memcpy_whole) + " GB/s",
                    ratio(whole_gbps, memcpy_whole)});
      table.AddRow({transport, std::string(DTypeName(dtype)), "1 block, 1 layer: latency",
                    absl::StrCat(l.region_bytes()),
                    Fixed(small_lat, 1) + " us (" + Fixed(small_rx_lat, 1) + " at rx)",
                    perf_lat_test.empty() ? "-" : Fixed(perf_lat, 1) + " us " + perf_lat_test,
                    perf_lat > 0 ? Fixed(small_lat / perf_lat) + "x" : "-", "", ""});
      nlohmann::json r = {{"transport", transport},
                          {"dtype", DTypeName(dtype)},
                          {"path", session->path()},
                          {"op_bytes", op_bytes},
                          {"layer_bytes", layer_bytes},
                          {"whole_bytes", whole_bytes},
                          {"layer_gbps", layer_gbps},
                          {"layer_receiver_gbps", layer_rx_gbps},
                          {"whole_gbps", whole_gbps},
                          {"small_latency_us", small_lat},
                          {"small_latency_receiver_us", small_rx_lat},
                          {"memcpy_layer_gbps", memcpy_layer},
                          {"memcpy_whole_gbps", memcpy_whole},
                          {"perftest_best_gbps", perf_bw},
                          {"perftest_best_bw_test", perf_bw_test},
                          {"perftest_best_latency_us", perf_lat},
                          {"perftest_best_latency_test", perf_lat_test}};
      results.push_back(r);
      if (dtype == DType::kF32) {
        if (perf_bw > 0)
          summary[absl::StrCat("ratio_vs_perftest_", transport)] = layer_gbps / perf_bw;
        if (perf_lat > 0)
          summary[absl::StrCat("latency_over_perftest_", transport)] = small_lat / perf_lat;
        if (transport == "shm") summary["ratio_vs_memcpy_shm"] = whole_gbps / memcpy_whole;
      }
    }
  }
  std::printf("%s", table.ToString().c_str());
  summary["results"] = results;
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf("summary: %s/summary.json\n", cfg.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::bench
