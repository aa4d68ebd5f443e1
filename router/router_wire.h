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

// A worker role on the wire and in the router: `field` names the field in the error (decode
// or prefill only).
absl::StatusOr<WorkerRole> RoleFromProto(v1::WorkerRole role, absl::string_view field);
v1::WorkerRole RoleToProto(WorkerRole role);

// INVALID_ARGUMENT naming the field ("registration.<field>") for anything malformed.
absl::StatusOr<WorkerInfo> WorkerInfoFromProto(const v1::WorkerRegistration& registration);
PrefixCacheUpdate PrefixUpdateFromProto(const v1::PrefixCacheEvents& events);

void WorkerInfoToProto(const WorkerInfo& info, v1::WorkerRegistration* out);
void WorkerStatusToProto(const WorkerStatus& status, v1::WorkerStatus* out);
void PlacementToProto(const Placement& placement, v1::Placement* out);
void DecisionRecordToProto(const DecisionRecord& record, v1::DecisionRecord* out);
// What a finished request's result says of its offload (meaningful when it was offloaded and
// did not fall back): the prefill worker's measurements, for LearnFromOffload.
PrefillOutcome PrefillOutcomeOf(const v1::GenerateResult& result, uint64_t model_fingerprint);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_ROUTER_WIRE_H_
