// Workers' reports on the wire: the one conversion between v1::LoadReport and the domain's
// WorkerReport (common/worker_reports.h), used by the workers that send reports and the router
// that reads them, and between a Prefill answer's measurements and PrefillMeasurement.
// Thread-safety: pure functions.
#ifndef PDSERVE_WIRE_REPORT_BRIDGE_H_
#define PDSERVE_WIRE_REPORT_BRIDGE_H_

#include "common/worker_reports.h"
#include "pdserve/v1/prefill.pb.h"
#include "pdserve/v1/registry.pb.h"

namespace pdserve::wire {

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
