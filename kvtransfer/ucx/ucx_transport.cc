#include "kvtransfer/ucx/ucx_transport.h"

#include <cstdio>
#include <cstring>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/zero_pages.h"
#include "kvtransfer/ucx/ucx_handles.h"
#include "kvtransfer/ucx/ucx_status.h"
#include "kvtransfer/wire.h"

namespace pdserve::kvtransfer {

// ---------------------------------------------------------------------------------------
// Internal types.

// A pool may be created and destroyed on the worker thread while the transport is closing:
// when its creation outlived the caller's timeout, the abandoned result goes with the call's
// state there, possibly after the transport cleared thread_. So it is given the worker thread
// when the call is made (the transport itself, its context and config, outlive every task
// the thread runs).
class UcxTransport::Pool final : public LocalPool {
 public:
  Pool(UcxTransport* transport, UcxWorkerThread* thread, ucp_mem_h memh, void* base, size_t bytes,
       const KvLayout& layout)
      : transport_(transport),
        thread_(thread),
        memh_(memh),
        base_(base),
        bytes_(bytes),
        layout_(layout) {}
  ~Pool() override {
    Pool* self = this;
    transport_->served_pool_.compare_exchange_strong(self, nullptr);
    const absl::Status s = thread_->RunSync(
        transport_->config_.call_timeout,
        +[](ucp_context_h context, ucp_mem_h memh) {
          return FromUcs(ucp_mem_unmap(context, memh), "mem unmap");
        },
        transport_->context_, memh_);
    if (!s.ok()) PDS_LOG(WARNING) << s;
  }
  void* base() const override { return base_; }
  size_t bytes() const override { return bytes_; }
  const KvLayout& layout() const override { return layout_; }
  ucp_mem_h memh() const { return memh_; }

 private:
  UcxTransport* transport_;
  UcxWorkerThread* thread_;
  ucp_mem_h memh_;
  void* base_;
  size_t bytes_;
  KvLayout layout_;
};

struct UcxTransport::Peer {
  UcxEndpoint ep;
  UcxRemoteKey rkey;  // Declared after the endpoint: destroyed before it.
  DataPath path = DataPath::kPut;
  std::string receiver_id;
  uint64_t epoch = 0;
  std::atomic<bool> failed{false};
};

struct UcxTransport::OutboundState {
  // Fixed at Open(); read by worker-thread tasks, which hold the state but never the
  // Outbound itself (it may be destroyed while tasks are queued).
  UcxTransport* transport = nullptr;
  Peer* peer = nullptr;  // Lives until the transport closes (retired peers are kept).
  TransferTarget target;
  Pool* source = nullptr;
  uint64_t layout_hash = 0;

  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  int data_outstanding ABSL_GUARDED_BY(mu) = 0;  // Data operations not yet complete.
  int layers_posted ABSL_GUARDED_BY(mu) = 0;
  uint64_t bytes_issued ABSL_GUARDED_BY(mu) = 0;  // Data posted (what COMPLETE announces).
  uint64_t bytes_posted ABSL_GUARDED_BY(mu) = 0;  // Data whose operation completed.
  // A finish or abort whose flush completed while data operations were still in flight
  // (ucp_ep_flush does not wait for rendezvous active messages): it proceeds when the last
  // one completes.
  int deferred_kind ABSL_GUARDED_BY(mu) = -1;
  ControlHeader deferred_header ABSL_GUARDED_BY(mu);
  int completions_sent ABSL_GUARDED_BY(mu) = 0;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  absl::Status error ABSL_GUARDED_BY(mu);
  std::atomic<bool> aborted{false};

  void RecordError(const absl::Status& s) {
    absl::MutexLock lock(&mu);
    if (error.ok()) error = s;
  }
};

// Lives from an operation's posting to its completion callback.
struct UcxTransport::OpContext {
  enum Kind { kData, kFlushLayer, kFlushFinish, kFlushAbort, kControl };
  Kind kind;
  std::shared_ptr<OutboundState> state;
  UcxTransport* transport;
  Peer* peer;
  DataHeader data_header;
  ControlHeader control_header;
  uint64_t bytes = 0;
};

namespace {

DataPath DetectPath(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return DataPath::kActiveMessage;
  ucp_ep_print_info(ep, stream);
  fclose(stream);
  // Lanes that do RMA natively show up as "put[N]"; where put is emulated over active
  // messages (TCP) there is no such line.
  const bool native_put = text != nullptr && absl::StrContains(text, "put[");
  free(text);
  return native_put ? DataPath::kPut : DataPath::kActiveMessage;
}

ucs_status_t StatusOf(ucs_status_ptr_t p) {
  if (p == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(p)) return UCS_PTR_STATUS(p);
  return UCS_INPROGRESS;
}

// Waits for `cond` (evaluated under `mu`). No spinning here: on small machines the waiter
// would steal the core the worker thread needs to make the condition true.
bool AwaitCondition(absl::Mutex* mu, const std::function<bool()>& cond, absl::Duration timeout) {
  absl::MutexLock lock(mu);
  return mu->AwaitWithTimeout(absl::Condition(&cond), timeout);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Sender.

class UcxTransport::Outbound final : public OutboundTransfer {
 public:
  Outbound(UcxTransport* transport, Peer* peer, TransferTarget target, Pool* source)
      : state_(std::make_shared<OutboundState>()) {
    state_->transport = transport;
    state_->peer = peer;
    state_->target = std::move(target);
    state_->source = source;
    state_->layout_hash =
        HashLayout(state_->target.pool.layout, state_->target.pool.model_fingerprint);
  }

  ~Outbound() override {
    // An unfinished transfer stops writing before it goes away (bounded).
    bool open;
    {
      absl::MutexLock lock(&state_->mu);
      open = state_->completions_sent == 0 && !state_->stopped && state_->layers_posted > 0;
    }
    if (open) Abort(absl::Seconds(5)).IgnoreError();
  }

  absl::Status WriteLayer(int layer, absl::Span<const int32_t> source_blocks) override {
    const KvLayout& src = state_->source->layout();
    const TransferTarget& target = state_->target;
    if (state_->aborted.load()) return absl::CancelledError("kv transfer: aborted");
    if (layer < 0 || layer >= src.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv transfer: layer ", layer, " is outside [0, ", src.num_layers, ")"));
    }
    if (source_blocks.size() != target.block_ids.size()) {
      return absl::InvalidArgumentError(absl::StrCat("kv transfer: ", source_blocks.size(),
                                                     " source blocks for ", target.block_ids.size(),
                                                     " target blocks"));
    }
    for (int32_t b : source_blocks) {
      if (b < 0 || b >= src.num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("kv transfer: source block ", b, " is outside [0, ", src.num_blocks, ")"));
      }
    }
    {
      absl::MutexLock lock(&state_->mu);
      if (!state_->error.ok()) return state_->error;
      ++state_->layers_posted;
    }
    auto runs = CoalesceRuns(source_blocks, target.block_ids);
    state_->transport->thread_->Post([layer, runs = std::move(runs), state = state_] {
      if (state->aborted.load()) return;
      IssueLayer(state, layer, runs);
    });
    return absl::OkStatus();
  }

  absl::Status Finish(absl::Duration timeout) override {
    int sent_before;
    {
      absl::MutexLock lock(&state_->mu);
      sent_before = state_->completions_sent;
    }
    state_->transport->thread_->Post(
        [state = state_] { PostFlush(state, OpContext::kFlushFinish, 0); });
    OutboundState* st = state_.get();
    auto done = [st, sent_before]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return st->completions_sent > sent_before || !st->error.ok();
    };
    if (!AwaitCondition(&state_->mu, done, timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("kv transfer ", state_->target.token, ": writes not complete at ",
                       state_->target.pool.receiver_id, " within ", absl::FormatDuration(timeout)));
    }
    absl::MutexLock lock(&state_->mu);
    return state_->error;
  }

  absl::Status Abort(absl::Duration timeout) override {
    state_->aborted.store(true);
    state_->transport->thread_->Post(
        [state = state_] { PostFlush(state, OpContext::kFlushAbort, 0); });
    OutboundState* st = state_.get();
    auto stopped = [st]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return st->stopped; };
    if (!AwaitCondition(&state_->mu, stopped, timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("kv transfer ", state_->target.token,
                                                      ": in-flight writes did not drain within ",
                                                      absl::FormatDuration(timeout)));
    }
    return absl::OkStatus();
  }

  int layers_written() const override {
    absl::MutexLock lock(&state_->mu);
    return state_->layers_posted;
  }
  uint64_t bytes_written() const override {
    absl::MutexLock lock(&state_->mu);
    return state_->bytes_posted;
  }
  DataPath data_path() const override { return state_->peer->path; }

 private:
  // Worker thread: posts every run of one layer (K then V), then a flush whose completion
  // sends LAYER_DONE.
  static void IssueLayer(const std::shared_ptr<OutboundState>& state, int layer,
                         const std::vector<BlockRun>& runs) {
    const KvLayout& src = state->source->layout();
    const KvLayout& dst = state->target.pool.layout;
    Peer* peer = state->peer;
    const size_t region = src.region_bytes();
    for (int kv = 0; kv < 2; ++kv) {
      for (const BlockRun& run : runs) {
        const size_t bytes = region * run.count;
        const uint8_t* from = static_cast<const uint8_t*>(state->source->base()) +
                              src.RegionOffset(layer, kv, run.source_first);
        auto* op = new OpContext{OpContext::kData, state, state->transport, peer, {}, {}, bytes};
        ucp_request_param_t param{};
        param.op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
        param.cb.send = &Outbound::OnSent;
        param.user_data = op;
        param.memh = state->source->memh();
        ucs_status_ptr_t request;
        if (peer->path == DataPath::kPut) {
          const uint64_t remote =
              state->target.pool.base_address + dst.RegionOffset(layer, kv, run.target_first);
          request = ucp_put_nbx(peer->ep.get(), from, bytes, remote, peer->rkey.get(), &param);
        } else {
          DataHeader& h = op->data_header;
          h.kv = static_cast<uint16_t>(kv);
          h.token = state->target.token;
          h.epoch = state->target.pool.epoch;
          h.layout_hash = state->layout_hash;
          h.layer = layer;
          h.first_block = run.target_first;
          h.num_blocks = run.count;
          request = ucp_am_send_nbx(peer->ep.get(), kAmData, &h, sizeof(h), from, bytes, &param);
        }
        state->transport->operations_posted_.fetch_add(1);
        {
          absl::MutexLock lock(&state->mu);
          ++state->data_outstanding;
          state->bytes_issued += bytes;
        }
        Track(op, request);
      }
    }
    PostFlush(state, OpContext::kFlushLayer, layer);
  }

  // Worker thread: a flush whose completion sends LAYER_DONE (layer), COMPLETE (finish), or
  // marks the transfer stopped and sends ABORT (abort).
  static void PostFlush(const std::shared_ptr<OutboundState>& state, OpContext::Kind kind,
                        int layer) {
    ControlHeader h;
    h.token = state->target.token;
    h.epoch = state->target.pool.epoch;
    h.layout_hash = state->layout_hash;
    h.layer = layer;
    h.blocks_hash = HashBlocks(state->target.block_ids);
    auto* op = new OpContext{kind, state, state->transport, state->peer, {}, h, 0};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &Outbound::OnSent;
    param.user_data = op;
    Track(op, ucp_ep_flush_nbx(state->peer->ep.get(), &param));
  }

  // Either completes `op` now (the call finished or failed inline) or counts it as
  // outstanding until OnSent.
  static void Track(OpContext* op, ucs_status_ptr_t request) {
    {
      absl::MutexLock lock(&op->state->mu);
      ++op->state->outstanding;
    }
    if (request == nullptr || UCS_PTR_IS_ERR(request)) Completed(op, StatusOf(request));
  }

  static void OnSent(void* request, ucs_status_t status, void* user_data) {
    Completed(static_cast<OpContext*>(user_data), status);
    ucp_request_free(request);
  }

  // Runs on the worker thread exactly once per operation. It only uses the OpContext (which
  // holds the shared state), so it is safe after the Outbound is gone.
  static void Completed(OpContext* op, ucs_status_t status);

  std::shared_ptr<OutboundState> state_;
};

void UcxTransport::Outbound::Completed(OpContext* op, ucs_status_t status) {
  std::unique_ptr<OpContext> owned(op);
  OutboundState& state = *op->state;
  if (status != UCS_OK) {
    state.RecordError(FromUcs(status, "kv transfer operation"));
    op->transport->send_failures_.fetch_add(1);
  } else if (op->kind == OpContext::kData) {
    op->transport->bytes_sent_.fetch_add(op->bytes);
  }
  int follow_up = -1;  // A control message to send now: its flush kind.
  ControlHeader header = op->control_header;
  {
    absl::MutexLock lock(&state.mu);
    --state.outstanding;
    switch (op->kind) {
      case OpContext::kData:
        --state.data_outstanding;
        if (status == UCS_OK) state.bytes_posted += op->bytes;
        if (state.data_outstanding == 0 && state.deferred_kind >= 0) {
          follow_up = state.deferred_kind;
          header = state.deferred_header;
          state.deferred_kind = -1;
        }
        break;
      case OpContext::kFlushLayer:
        if (state.error.ok()) follow_up = OpContext::kFlushLayer;  // Advisory progress.
        break;
      case OpContext::kFlushFinish:
      case OpContext::kFlushAbort:
        if (state.data_outstanding > 0) {
          state.deferred_kind = op->kind;
          state.deferred_header = op->control_header;
        } else {
          follow_up = op->kind;
        }
        break;
      case OpContext::kControl:
        if (op->control_header.type == ControlType::kComplete && status == UCS_OK)
          ++state.completions_sent;
        break;
    }
    if (follow_up == OpContext::kFlushAbort) state.stopped = true;  // Nothing more can land.
    if (follow_up == OpContext::kFlushFinish && !state.error.ok()) follow_up = -1;
  }
  if (follow_up < 0) return;
  auto* control =
      new OpContext{OpContext::kControl, op->state, op->transport, op->peer, {}, header, 0};
  ControlHeader& h = control->control_header;
  h.type = follow_up == OpContext::kFlushLayer    ? ControlType::kLayerDone
           : follow_up == OpContext::kFlushFinish ? ControlType::kComplete
                                                  : ControlType::kAbort;
  {
    absl::MutexLock lock(&state.mu);
    h.layers = state.layers_posted;
    h.bytes = op->peer->path == DataPath::kActiveMessage ? state.bytes_issued : 0;
    ++state.outstanding;
  }
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &Outbound::OnSent;
  param.user_data = control;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t request = ucp_am_send_nbx(op->peer->ep.get(), kAmControl, &h,
                                             sizeof(ControlHeader), nullptr, 0, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) Completed(control, StatusOf(request));
}

// ---------------------------------------------------------------------------------------
// Transport.

absl::Status UcxTransportConfig::Validate() const {
  if (data_path != "auto" && data_path != "put" && data_path != "am") {
    return absl::InvalidArgumentError(
        absl::StrCat("kv transport data_path: '", data_path, "' is not one of auto, put, am"));
  }
  if (call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("kv transport call_timeout: must be > 0");
  }
  if (handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv transport handshake_timeout: must be > 0, got ",
                     absl::FormatDuration(handshake_timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvTransport>> MakeUcxTransport(const UcxTransportConfig& config) {
  ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport, UcxTransport::Create(config));
  return transport;
}

UcxTransport::UcxTransport(UcxTransportConfig config) : config_(std::move(config)) {}

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(
    const UcxTransportConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<UcxTransport> t(new UcxTransport(config));
  t->address_checker_ = std::make_unique<PeerAddressChecker>(
      PeerAddressCheckConfig{.probe_binary = config.address_probe,
                             .transports = config.transports,
                             .net_devices = config.net_devices});
  ucp_config_t* ucp_config = nullptr;
  RETURN_IF_ERROR(FromUcs(ucp_config_read(nullptr, nullptr, &ucp_config), "config read"));
  absl::Status status;
  if (!config.transports.empty()) {
    status = FromUcs(ucp_config_modify(ucp_config, "TLS", config.transports.c_str()),
                     absl::StrCat("transports '", config.transports, "'"));
  }
  if (status.ok() && !config.net_devices.empty()) {
    status = FromUcs(ucp_config_modify(ucp_config, "NET_DEVICES", config.net_devices.c_str()),
                     absl::StrCat("net devices '", config.net_devices, "'"));
  }
  if (status.ok()) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    status = FromUcs(ucp_init(&params, ucp_config, &t->context_), "init");
  }
  ucp_config_release(ucp_config);
  RETURN_IF_ERROR(status);
  UcxTransport* raw = t.get();
  ASSIGN_OR_RETURN(t->thread_,
                   UcxWorkerThread::Start(
                       t->context_,
                       [raw](ucp_worker_h worker) {
                         for (auto [id, cb] :
                              {std::pair<unsigned, ucp_am_recv_callback_t>{kAmData, &OnDataMessage},
                               {kAmControl, &OnControlMessage},
                               {kAmHello, &OnHello},
                               {kAmHelloAck, &OnHelloAck}}) {
                           ucp_am_handler_param_t p{};
                           p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                          UCP_AM_HANDLER_PARAM_FIELD_CB |
                                          UCP_AM_HANDLER_PARAM_FIELD_ARG;
                           p.id = id;
                           p.cb = cb;
                           p.arg = raw;
                           RETURN_IF_ERROR(FromUcs(ucp_worker_set_am_recv_handler(worker, &p),
                                                   "set am handler"));
                         }
                         return absl::OkStatus();
                       },
                       config.worker_spin));
  t->thread_->SetStopHook([raw, thread = t->thread_.get()] { raw->ClosePeers(thread); });
  return t;
}

UcxTransport::~UcxTransport() {
  thread_.reset();  // Closes peers on the worker thread, destroys the worker.
  if (context_ != nullptr) ucp_cleanup(context_);
}

absl::StatusOr<std::unique_ptr<LocalPool>> UcxTransport::CreatePool(const KvLayout& layout) {
  RETURN_IF_ERROR(layout.Validate());
  // Mapping a pool takes time in proportion to its size on a loaded machine (a 512 MiB pool
  // took over 10 s beside a soak run on 2 cores); the zeroing is done here, on the caller's
  // thread, not on the UCX thread under the call's timeout.
  const absl::Duration timeout =
      config_.call_timeout +
      config_.pool_fill_time_per_gib * (static_cast<double>(layout.pool_bytes()) / (1 << 30));
  ASSIGN_OR_RETURN(
      std::unique_ptr<LocalPool> pool,
      thread_->RunSync(
          timeout,
          +[](UcxTransport* t, UcxWorkerThread* thread, KvLayout layout,
              absl::Duration delay) -> absl::StatusOr<std::unique_ptr<LocalPool>> {
            if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
            const size_t bytes = layout.pool_bytes();
            ucp_mem_map_params_t p{};
            p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                           UCP_MEM_MAP_PARAM_FIELD_FLAGS;
            p.address = nullptr;
            p.length = bytes;
            p.flags = UCP_MEM_MAP_ALLOCATE;
            ucp_mem_h memh;
            RETURN_IF_ERROR(FromUcs(ucp_mem_map(t->context_, &p, &memh),
                                    absl::StrCat("allocate ", bytes, " bytes")));
            ucp_mem_attr_t attr{};
            attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
            if (absl::Status s = FromUcs(ucp_mem_query(memh, &attr), "mem query"); !s.ok()) {
              ucp_mem_unmap(t->context_, memh);
              return s;
            }
            return std::unique_ptr<LocalPool>(
                new Pool(t, thread, memh, attr.address, attr.length, layout));
          },
          this, thread_.get(), layout, config_.testing_pool_map_delay));
  if (config_.commit_pool) {
    std::memset(pool->base(), 0, layout.pool_bytes());
  } else {
    ZeroResidentPages(pool->base(), layout.pool_bytes());  // The rest reads as zero.
  }
  return pool;
}

absl::StatusOr<KvPoolDescriptor> UcxTransport::ServePool(LocalPool* local,
                                                         const std::string& receiver_id,
                                                         uint64_t model_fingerprint,
                                                         uint64_t epoch) {
  auto* pool = dynamic_cast<Pool*>(local);
  if (pool == nullptr)
    return absl::InvalidArgumentError("kv transport: pool was not created by this transport");
  KvPoolDescriptor d;
  d.receiver_id = receiver_id;
  d.base_address = reinterpret_cast<uint64_t>(pool->base());
  d.layout = pool->layout();
  d.model_fingerprint = model_fingerprint;
  d.epoch = epoch;
  // The packed rkey, then the worker's address.
  using Packed = std::pair<std::string, std::string>;
  ASSIGN_OR_RETURN(
      Packed packed,
      thread_->RunSync(
          config_.call_timeout,
          +[](ucp_context_h context, ucp_worker_h worker,
              ucp_mem_h memh) -> absl::StatusOr<Packed> {
            Packed out;
            void* rkey = nullptr;
            size_t rkey_size = 0;
            RETURN_IF_ERROR(FromUcs(ucp_rkey_pack(context, memh, &rkey, &rkey_size), "rkey pack"));
            out.first.assign(static_cast<const char*>(rkey), rkey_size);
            ucp_rkey_buffer_release(rkey);
            ucp_address_t* address = nullptr;
            size_t address_size = 0;
            RETURN_IF_ERROR(
                FromUcs(ucp_worker_get_address(worker, &address, &address_size), "worker address"));
            out.second.assign(reinterpret_cast<const char*>(address), address_size);
            ucp_worker_release_address(worker, address);
            return out;
          },
          context_, thread_->worker(), pool->memh()));
  d.packed_rkey = std::move(packed.first);
  d.worker_address = std::move(packed.second);
  table_.Serve(pool->layout(), model_fingerprint, epoch);
  served_pool_.store(pool);
  return d;
}

absl::StatusOr<std::shared_ptr<InboundTransfer>> UcxTransport::Expect(
    const TransferExpectation& e) {
  // Bytes are counted on the receiver for active-message senders; put senders report 0 bytes
  // and completion relies on their flush. Counting is decided per completion, so reserve
  // with counting on: a put sender's COMPLETE carries bytes = 0 which skips the count.
  return table_.Expect(e, /*count_bytes=*/true);
}

void UcxTransport::Release(uint64_t token) { table_.Release(token); }

namespace {

std::string PeerKey(const KvPoolDescriptor& d) {
  return absl::StrCat(d.receiver_id, "/", d.epoch, "/", Xxh64(d.worker_address));
}

}  // namespace

UcxTransport::Peer* UcxTransport::FindPeer(const KvPoolDescriptor& d) const {
  absl::MutexLock lock(&peers_mu_);
  auto it = peers_.find(PeerKey(d));
  return it != peers_.end() && !it->second->failed.load() ? it->second.get() : nullptr;
}

absl::StatusOr<UcxTransport::Peer*> UcxTransport::GetPeer(const KvPoolDescriptor& d) {
  const std::string key = PeerKey(d);
  {
    // Only this thread changes peers_; others read it under the lock, which is not held
    // while connecting (the greeting waits on the network).
    absl::MutexLock lock(&peers_mu_);
    auto it = peers_.find(key);
    if (it != peers_.end() && !it->second->failed.load()) return it->second.get();
    // A new epoch of a receiver we knew (it restarted): its old endpoint and rkey are stale.
    // They are retired, not closed, because transfers of the old epoch may still hold them;
    // retired peers are closed when the transport shuts down.
    for (auto old = peers_.begin(); old != peers_.end();) {
      if (old->first != key &&
          (old->second->receiver_id == d.receiver_id || old->second->failed.load())) {
        retired_peers_.push_back(std::move(old->second));
        peers_.erase(old++);
      } else {
        ++old;
      }
    }
    it = peers_.find(key);
    if (it != peers_.end()) {  // Failed peer: retire and reconnect.
      retired_peers_.push_back(std::move(it->second));
      peers_.erase(it);
    }
  }
  auto peer = std::make_unique<Peer>();
  peer->receiver_id = d.receiver_id;
  peer->epoch = d.epoch;
  auto create = [&](ucp_err_handling_mode_t mode) -> absl::Status {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.address = reinterpret_cast<const ucp_address_t*>(d.worker_address.data());
    p.err_mode = mode;
    if (mode == UCP_ERR_HANDLING_MODE_PEER) {
      p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      p.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
        static_cast<Peer*>(arg)->failed.store(true);
        PDS_LOG(WARNING) << "kv transfer: peer endpoint failed: " << ucs_status_string(status);
      };
      p.err_handler.arg = peer.get();
    }
    ucp_ep_h ep = nullptr;
    RETURN_IF_ERROR(FromUcs(ucp_ep_create(thread_->worker(), &p, &ep),
                            absl::StrCat("connect to ", d.receiver_id)));
    peer->ep = UcxEndpoint(ep, thread_.get());  // Closes the previous one, if any.
    return absl::OkStatus();
  };
  // On any error below, `peer` and its handles are released on the way out.
  RETURN_IF_ERROR(create(UCP_ERR_HANDLING_MODE_NONE));
  DataPath path = DetectPath(peer->ep.get());
  if (config_.data_path == "put") path = DataPath::kPut;
  if (config_.data_path == "am") path = DataPath::kActiveMessage;
  if (path == DataPath::kActiveMessage) {
    // No shared memory on this path, so peer error handling costs nothing and makes a dead
    // TCP peer an error instead of a fatal one.
    peer->ep.Close();
    RETURN_IF_ERROR(create(UCP_ERR_HANDLING_MODE_PEER));
    RETURN_IF_ERROR(Greet(peer->ep.get(), d.receiver_id));
  } else {
    ucp_rkey_h rkey = nullptr;
    RETURN_IF_ERROR(
        FromUcs(ucp_ep_rkey_unpack(peer->ep.get(), d.packed_rkey.data(), &rkey), "rkey unpack"));
    peer->rkey = UcxRemoteKey(rkey);
  }
  peer->path = path;
  PDS_LOG(DEBUG) << "kv transfer: connected to " << d.receiver_id << " epoch " << d.epoch << " via "
                 << DataPathName(path);
  Peer* raw = peer.get();
  absl::MutexLock lock(&peers_mu_);
  peers_[key] = std::move(peer);
  return raw;
}

void UcxTransport::ClosePeers(UcxWorkerThread* thread) {
  {
    absl::MutexLock lock(&peers_mu_);
    for (auto& [key, peer] : peers_) retired_peers_.push_back(std::move(peer));
    peers_.clear();
  }
  // Each peer's rkey, then its endpoint (UcxEndpoint progresses the close on this thread).
  retired_peers_.clear();
}

absl::StatusOr<UcxTransport::Peer*> UcxTransport::Connect(const KvPoolDescriptor& descriptor) {
  if (Peer* known = FindPeer(descriptor); known != nullptr) return known;
  // Bytes from the wire reach UCX only after a disposable process survived them.
  RETURN_IF_ERROR(address_checker_->Check(descriptor.worker_address, descriptor.packed_rkey));
  return thread_->RunSync(
      config_.call_timeout,
      +[](UcxTransport* t, KvPoolDescriptor d) -> absl::StatusOr<Peer*> { return t->GetPeer(d); },
      this, descriptor);
}

absl::StatusOr<DataPath> UcxTransport::PathTo(const KvPoolDescriptor& descriptor) {
  ASSIGN_OR_RETURN(Peer * peer, Connect(descriptor));
  return peer->path;
}

absl::StatusOr<std::unique_ptr<OutboundTransfer>> UcxTransport::Open(const TransferTarget& target,
                                                                     LocalPool* local,
                                                                     uint64_t source_fingerprint) {
  auto* source = dynamic_cast<Pool*>(local);
  if (source == nullptr)
    return absl::InvalidArgumentError(
        "kv transport: source pool was not created by this transport");
  RETURN_IF_ERROR(ValidateTarget(target, source->layout(), source_fingerprint));
  ASSIGN_OR_RETURN(Peer * peer, Connect(target.pool));
  return std::unique_ptr<OutboundTransfer>(new Outbound(this, peer, target, source));
}

TransportCounters UcxTransport::counters() const {
  TransportCounters c;
  table_.AddCounters(&c);
  c.bytes_sent = bytes_sent_.load();
  c.operations_posted = operations_posted_.load();
  c.transfers_failed += send_failures_.load();
  return c;
}

// ---------------------------------------------------------------------------------------
// Receiver.

ucs_status_t UcxTransport::OnControlMessage(void* arg, const void* header, size_t header_length,
                                            void*, size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxTransport*>(arg);
  auto h = ParseHeader<ControlHeader>(header, header_length);
  if (!h.has_value()) {
    PDS_LOG_EVERY_N_SEC(WARNING, 5) << "kv receiver: malformed control message";
    return UCS_OK;
  }
  if (absl::Status s = self->table_.AcceptControl(*h); !s.ok()) {
    PDS_LOG_EVERY_N_SEC(WARNING, 1) << "kv receiver: rejected control message: " << s;
  }
  return UCS_OK;
}

ucs_status_t UcxTransport::OnDataMessage(void* arg, const void* header, size_t header_length,
                                         void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  auto h = ParseHeader<DataHeader>(header, header_length);
  Pool* pool = self->served_pool_.load();
  if (!h.has_value() || pool == nullptr) return rendezvous ? UCS_ERR_REJECTED : UCS_OK;
  auto destination = self->table_.AcceptData(*h, length);
  if (!destination.ok()) {
    PDS_LOG_EVERY_N_SEC(WARNING, 1) << "kv receiver: rejected data: " << destination.status();
    return rendezvous ? UCS_ERR_REJECTED : UCS_OK;
  }
  if (rendezvous) {
    // Pull the payload into the pool from outside this callback.
    self->thread_->Post(
        [self, data, dest = *std::move(destination)] { self->StartReceive(data, dest); });
    return UCS_INPROGRESS;
  }
  std::memcpy(static_cast<uint8_t*>(pool->base()) + destination->pool_offset, data, length);
  destination->transfer->AddReceivedBytes(length);
  destination->transfer->WriteFinished();
  return UCS_OK;
}

void UcxTransport::StartReceive(void* descriptor, ReceiverTable::DataDestination dest) {
  Pool* pool = served_pool_.load();
  struct Receive {
    std::shared_ptr<InboundTransfer> transfer;
    uint64_t bytes;
  };
  auto* receive = new Receive{dest.transfer, dest.bytes};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
  param.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<Receive> r(static_cast<Receive*>(user_data));
    if (status == UCS_OK) {
      r->transfer->AddReceivedBytes(r->bytes);
    } else {
      r->transfer->Fail(FromUcs(status, "kv receive"));
    }
    r->transfer->WriteFinished();
    ucp_request_free(request);
  };
  param.user_data = receive;
  param.memh = pool->memh();
  ucs_status_ptr_t request = ucp_am_recv_data_nbx(
      thread_->worker(), descriptor, static_cast<uint8_t*>(pool->base()) + dest.pool_offset,
      dest.bytes, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    std::unique_ptr<Receive> r(receive);
    const ucs_status_t status = StatusOf(request);
    if (status == UCS_OK) {
      r->transfer->AddReceivedBytes(r->bytes);
    } else {
      r->transfer->Fail(FromUcs(status, "kv receive"));
    }
    r->transfer->WriteFinished();
  }
}

}  // namespace pdserve::kvtransfer
