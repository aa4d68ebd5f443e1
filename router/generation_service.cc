#include "router/generation_service.h"

#include <malloc.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/retry_after.h"
#include "router/request_errors.h"
#include "server/grpc_channel.h"
#include "wire/request_bridge.h"

namespace pdserve::router {
namespace {

// Refused text prompts at least this big return their memory to the system at once.
constexpr size_t kTrimAfterPromptBytes = size_t{1} << 20;

// Fails the call at once (validation, admission).
class ErrorReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit ErrorReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

GenerationService::GenerationService(const ModelCatalog* catalog, Placer* placer,
                                     WorkerRegistry* registry, CostModel* cost_model,
                                     RouterMetrics* metrics,
                                     const GenerationServiceOptions& options)
    : catalog_(catalog),
      registry_(registry),
      metrics_(metrics),
      options_(options),
      clients_(options.clients),
      tokenizers_("tokenize", options.tokenizer_threads, options.max_tokenize_queue) {
  deps_.placer = placer;
  deps_.registry = registry;
  deps_.cost_model = cost_model;
  deps_.metrics = metrics;
  deps_.testing_read_delay = options.testing_read_delay;
  deps_.stub = [this](const std::string& address) { return Stub(address); };
  deps_.on_finish = [this] {
    in_flight_.fetch_sub(1);
    metrics_->requests_in_flight.Decrement();
  };
}

v1::Decode::Stub* GenerationService::Stub(const std::string& address) {
  absl::MutexLock lock(&stubs_mu_);
  auto& stub = stubs_[address];
  if (!stub) stub = v1::Decode::NewStub(MakeChannel(address, options_.security));
  return stub.get();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  v1::GenerateRequest request;
  grpc::ByteBuffer copy = *raw;  // Deserialize consumes its buffer; copying shares the slices.
  const grpc::Status parsed =
      grpc::SerializationTraits<v1::GenerateRequest>::Deserialize(&copy, &request);
  if (!parsed.ok()) {
    const grpc::Status s(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("request: ", raw->Length(),
                                      " bytes that are not a pdserve.v1.GenerateRequest (",
                                      parsed.error_message(), ")"));
    RecordOutcome(*metrics_, "", s);
    return new ErrorReactor(s);
  }
  return GenerateParsed(context, &request);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::GenerateParsed(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  const absl::Time arrival = absl::Now();
  auto fail = [&](const std::string& model, const absl::Status& status) {
    const grpc::Status s = ToGrpcWithRetryAfter(status, context);
    RecordOutcome(*metrics_, model, s);
    return new ErrorReactor(s);
  };
  auto model = catalog_->Find(request->model());
  // Labelled as no model: a name that is not served must not become a label value, or every
  // distinct unknown name would add series that never go away.
  if (!model.ok()) return fail("", model.status());
  const CatalogModel* m = *model;
  wire::ModelLimits limits;
  limits.model_name = m->name;
  limits.vocab_size = m->config.vocab_size;
  limits.max_context_tokens = m->config.max_position_embeddings;
  limits.max_prompt_bytes = options_.max_prompt_bytes > 0
                                ? options_.max_prompt_bytes
                                : int64_t{16} * m->config.max_position_embeddings;
  // What costs nothing is checked here, on gRPC's thread; tokenizing is not.
  absl::StatusOr<wire::PrecheckedRequest> prechecked =
      wire::PrecheckGenerateRequest(*request, limits);
  if (!prechecked.ok()) return fail(m->name, prechecked.status());
  absl::StatusOr<SloConfig> slo =
      options_.slos.Resolve(request->objectives().slo_class(), request->objectives().ttft_ms(),
                            request->objectives().tpot_ms());
  if (!slo.ok()) return fail(m->name, slo.status());
  if (draining_.load()) {
    return fail(m->name,
                absl::UnavailableError(
                    "router draining (shutting down): send the request to another router"));
  }
  if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
    in_flight_.fetch_sub(1);
    return fail(
        m->name,
        WithRetryAfter(absl::ResourceExhaustedError(absl::StrCat(
                           "router overloaded: ", options_.max_in_flight, " requests in flight")),
                       options_.retry_after));
  }
  auto admitted = clients_.Admit(ResolveClient(*context, options_.client_identity),
                                 registry_->DecodeRequestSlots(options_.waiting_slots_per_worker));
  if (!admitted.ok()) {
    in_flight_.fetch_sub(1);
    metrics_->client_share_refusals.Increment();
    return fail(m->name, admitted.status());
  }
  metrics_->requests_in_flight.Increment();
  RelayCall* call = RelayCall::Create(deps_, context, m, arrival, *std::move(admitted));
  // The catalog's name is what an empty request names.
  auto start = [call, m, limits, slo = *slo, prechecked = *std::move(prechecked),
                forwarded = *request]() mutable {
    forwarded.set_model(m->name);
    if (forwarded.prompt_case() == v1::GenerateRequest::kChat && m->chat_template == nullptr &&
        !m->chat_template_error.empty()) {
      call->Fail(absl::InvalidArgumentError(
          absl::StrCat("prompt.chat: model '", m->name,
                       "' has a chat template this router cannot run: ", m->chat_template_error)));
      return;
    }
    auto validated = wire::ValidatePrecheckedRequest(forwarded, limits, std::move(prechecked),
                                                     m->tokenizer.get(), m->chat_template.get());
    if (!validated.ok()) {
      const bool big = wire::PromptBytes(forwarded) >= static_cast<int64_t>(kTrimAfterPromptBytes);
      call->Fail(validated.status());
      if (big) {
        // Megabytes of text and its pieces were just freed on this thread's arena; give them
        // back, or a router that refuses big prompts keeps their peak for good.
        v1::GenerateRequest().Swap(&forwarded);
        malloc_trim(0);
      }
      return;
    }
    // Downstream, the prompt travels as token ids (tokenized once, here), with max_tokens
    // resolved (max_tokens_to_context).
    forwarded.set_request_id(validated->request_id);
    // The decode worker bounds an offload attempt by the request's TTFT objective (the
    // client's, its class's or the router's): it travels with the request.
    forwarded.mutable_objectives()->set_ttft_ms(slo.ttft_ms);
    forwarded.mutable_sampling()->set_max_tokens(validated->sampling.max_tokens);
    forwarded.mutable_token_ids()->clear_ids();
    for (int32_t t : validated->prompt)
      forwarded.mutable_token_ids()->add_ids(static_cast<uint32_t>(t));
    PlacementRequest placement;
    placement.request_id = validated->request_id;
    placement.model = m;
    placement.max_tokens = validated->sampling.max_tokens;
    placement.slo = slo;
    call->Begin(std::move(forwarded), std::move(validated->prompt), std::move(placement));
  };
  if (request->prompt_case() != v1::GenerateRequest::kText &&
      request->prompt_case() != v1::GenerateRequest::kChat) {
    start();  // Token ids: range checks only.
  } else if (!tokenizers_.TrySubmit(std::move(start))) {
    // Text and chats are rendered and tokenized on the tokenizer threads.
    call->Fail(WithRetryAfter(absl::ResourceExhaustedError(
                                  absl::StrCat("router overloaded: ", options_.max_tokenize_queue,
                                               " prompts waiting to be tokenized")),
                              options_.retry_after));
  }
  return call;
}

bool GenerationService::WaitIdle(absl::Time deadline) const {
  // Shutdown only: polling a counter is simpler than signalling every call's end.
  while (in_flight_.load() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  return in_flight_.load() == 0;
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const v1::ListModelsRequest*,
                                                        v1::ListModelsResponse* response) {
  const std::vector<WorkerStatus> workers = registry_->Status();
  for (const auto& m : catalog_->models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_name(m->name);
    info->set_architecture(m->config.architecture);
    info->set_vocab_size(m->config.vocab_size);
    uint32_t max_context = m->config.max_position_embeddings;
    for (const WorkerStatus& w : workers) {
      const WorkerInfo& r = w.info;
      if (r.model != m->name) continue;
      info->set_fingerprint(r.model_fingerprint);
      if (r.is_decode()) {
        info->set_decode_workers(info->decode_workers() + 1);
        max_context = std::min(max_context, static_cast<uint32_t>(r.max_context_tokens));
      } else {
        info->set_prefill_workers(info->prefill_workers() + 1);
      }
    }
    info->set_max_context_tokens(max_context);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve::router
