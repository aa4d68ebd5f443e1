// The router's one edge between the wire and its domain: Registry protos to WorkerInfo and
// PrefixCacheUpdate on the way in (load reports: wire/report_bridge.h); WorkerStatus,
// Placement and DecisionRecord to protos on the way out. Only the gRPC service files
// (registry_service, relay_call, generation_service) include this; everything behind them works on
// router domain types. Thread-safety: pure functions.
#ifndef PDSERVE_ROUTER_ROUTER_WIRE_H_
#define PDSERVE_ROUTER_ROUTER_WIRE_H_

#include "absl/status/statusor.h"
#include "pdserve/v1/common.pb.h"
#include "pdserve/v1/generation.pb.h"
#include "pdserve/v1/registry.pb.h"
#include "router/placement_decision.h"
#include "router/worker_info.h"

namespace pdserve::router {

// Registrations and roles: wire/report_bridge.h (RegistrationFromProto, RoleFromProto), the
// workers' own conversion.
PrefixCacheUpdate PrefixUpdateFromProto(const v1::PrefixCacheEvents& events);

void WorkerStatusToProto(const WorkerStatus& status, v1::WorkerStatus* out);
void PlacementToProto(const Placement& placement, v1::Placement* out);
void DecisionRecordToProto(const DecisionRecord& record, v1::DecisionRecord* out);
// What a finished request's result says of its offload (meaningful when it was offloaded and
// did not fall back): the prefill worker's measurements, for LearnFromOffload.
PrefillOutcome PrefillOutcomeOf(const v1::GenerateResult& result, uint64_t model_fingerprint);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_ROUTER_WIRE_H_
