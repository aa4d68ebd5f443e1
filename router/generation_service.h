// The router's public API: Generation.Generate (check, admit, tokenize off gRPC's threads,
// place, relay) and ListModels. The only router file besides registry_service.cc that sees both
// protobuf and domain types. Thread-safety: gRPC calls it from its own threads; shared state is
// atomic or locked.
#ifndef PDSERVE_ROUTER_GENERATION_SERVICE_H_
#define PDSERVE_ROUTER_GENERATION_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/bounded_executor.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "pdserve/v1/generation.grpc.pb.h"
#include "router/client_admission.h"
#include "router/client_identity.h"
#include "router/model_catalog.h"
#include "router/relay_call.h"
#include "router/slo_catalog.h"
#include "server/grpc_security.h"

namespace pdserve::router {

struct GenerationServiceOptions {
  // Requests relayed at once; beyond it RESOURCE_EXHAUSTED. Default 4096.
  int max_in_flight = 4096;
  // Retry-after hint with RESOURCE_EXHAUSTED. Default 200 ms.
  absl::Duration retry_after = absl::Milliseconds(200);
  // Text prompts are tokenized on these threads, never on gRPC's. Default 2.
  int tokenizer_threads = 2;
  // Text prompts waiting for a tokenizer thread; beyond it RESOURCE_EXHAUSTED. Default 256.
  int max_tokenize_queue = 256;
  // Bytes of prompt text accepted (0: 16 bytes per token of the model's context). Default 0.
  int64_t max_prompt_bytes = 0;
  // Testing: see RelayDeps::testing_read_delay. Default 0.
  absl::Duration testing_read_delay = absl::ZeroDuration();
  // How channels to decode workers are secured; plaintext by default.
  GrpcSecurity security;
  // Resolves each request's objectives (GenerateRequest.objectives).
  SloCatalog slos;
  // Per-client shares (client_admission.h) of the decode workers' request slots, each
  // counting this many waiting requests (the placer's max_waiting_per_worker). Default 256.
  ClientAdmissionConfig clients;
  int waiting_slots_per_worker = 256;
  ClientIdentityConfig client_identity;
};

// Generate is a raw method (ByteBuffer in and out) so that the router, not gRPC, answers a
// request that does not parse: INVALID_ARGUMENT with a message instead of gRPC's bare
// UNIMPLEMENTED.
class GenerationService final
    : public v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::CallbackService> {
 public:
  GenerationService(const ModelCatalog* catalog, Placer* placer, WorkerRegistry* registry,
                    CostModel* cost_model, RouterMetrics* metrics,
                    const GenerationServiceOptions& options);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

  int in_flight() const { return in_flight_.load(); }
  const ClientAdmission& clients() const { return clients_; }
  // SIGTERM: new calls get UNAVAILABLE while those in flight run on. (Server shutdown refuses
  // new calls too, but it also ends the in-process calls of the HTTP front at once, so the
  // router refuses first and shuts down once those are done.)
  void BeginDrain() { draining_.store(true); }
  // Waits until nothing is in flight, or `deadline`; true if nothing is.
  bool WaitIdle(absl::Time deadline) const;

 private:
  v1::Decode::Stub* Stub(const std::string& address);
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateParsed(grpc::CallbackServerContext* context,
                                                             const v1::GenerateRequest* request);

  const ModelCatalog* catalog_;
  WorkerRegistry* registry_;
  RouterMetrics* metrics_;
  const GenerationServiceOptions options_;
  RelayDeps deps_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  ClientAdmission clients_;
  absl::Mutex stubs_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<v1::Decode::Stub>> stubs_
      ABSL_GUARDED_BY(stubs_mu_);
  // Last: destroyed first, so that queued tokenizations finish while the rest still exists.
  BoundedExecutor tokenizers_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_GENERATION_SERVICE_H_
