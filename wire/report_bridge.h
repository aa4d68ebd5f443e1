// Workers' registrations and reports on the wire: the one conversion between
// v1::WorkerRegistration / v1::LoadReport and the domain's WorkerRegistration / WorkerReport
// (common/worker_reports.h), used by the workers that send them and the router that reads
// them, and between a Prefill answer's measurements and PrefillMeasurement.
// Thread-safety: pure functions.
#ifndef PDSERVE_WIRE_REPORT_BRIDGE_H_
#define PDSERVE_WIRE_REPORT_BRIDGE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/worker_reports.h"
#include "pdserve/v1/prefill.pb.h"
#include "pdserve/v1/registry.pb.h"

namespace pdserve::wire {

// A worker role: `field` names the field in the error (decode or prefill only).
absl::StatusOr<WorkerRole> RoleFromProto(v1::WorkerRole role, absl::string_view field);
v1::WorkerRole RoleToProto(WorkerRole role);

// INVALID_ARGUMENT naming the field ("registration.<field>") for anything malformed (the
// registration's Validate() included); counts saturate rather than wrap.
absl::StatusOr<WorkerRegistration> RegistrationFromProto(const v1::WorkerRegistration& r);
void RegistrationToProto(const WorkerRegistration& registration, v1::WorkerRegistration* out);

// Counts past the domain's ranges are clamped (a forged report cannot overflow them), and a
// step's prefill share never exceeds its context.
WorkerReport ReportFromProto(const v1::LoadReport& report);
// The snapshot's fields, then one recent_steps entry per step (host_ms stays local).
void ReportToProto(const WorkerReport& report, v1::LoadReport* out);
void LoadToProto(const LoadSnapshot& load, v1::LoadReport* out);

// A prefill's measurements in the Prefill answer (prefill worker) and back (decode worker).
// Counts past the domain's ranges are clamped.
void MeasurementToProto(const PrefillMeasurement& measured, v1::PrefillResponse* out);
PrefillMeasurement MeasurementFromProto(const v1::PrefillResponse& response);

}  // namespace pdserve::wire

#endif  // PDSERVE_WIRE_REPORT_BRIDGE_H_
