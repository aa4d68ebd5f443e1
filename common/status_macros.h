// Status propagation macros for absl::Status / absl::StatusOr at module boundaries.
// Thread-safety: stateless.
#ifndef PDSERVE_COMMON_STATUS_MACROS_H_
#define PDSERVE_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PDS_STATUS_CONCAT_INNER_(a, b) a##b
#define PDS_STATUS_CONCAT_(a, b) PDS_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define RETURN_IF_ERROR(expr)                                      \
  do {                                                             \
    ::absl::Status pds_status_ = (expr);                           \
    if (ABSL_PREDICT_FALSE(!pds_status_.ok())) return pds_status_; \
  } while (false)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>); on error returns its
// status, otherwise moves the value into `lhs` (which may be a declaration: `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  PDS_ASSIGN_OR_RETURN_IMPL_(PDS_STATUS_CONCAT_(pds_statusor_, __LINE__), lhs, expr)

#define PDS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)             \
  auto statusor = (expr);                                           \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) return statusor.status(); \
  lhs = std::move(statusor).value()

namespace pdserve {

// Returns `status` with `context` prepended to its message ("context: message"); OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_STATUS_MACROS_H_
