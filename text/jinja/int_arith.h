// 64-bit integer arithmetic with Python's meaning for the template interpreter: floor
// division and modulo, and results that do not fit refused with an error naming the operation
// (Python's integers never overflow; wrapping, or signed overflow, would be wrong or undefined).
// Thread-safety: stateless.
#ifndef PDSERVE_TEXT_JINJA_INT_ARITH_H_
#define PDSERVE_TEXT_JINJA_INT_ARITH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja/value.h"

namespace pdserve::text::jinja {

// The error for `a op b` not fitting in 64 bits.
absl::Status IntOverflow(absl::string_view op, int64_t a, int64_t b);
// base ** exponent (exponent >= 0).
absl::StatusOr<int64_t> CheckedPow(int64_t base, int64_t exponent);
// Python's a // b (b != 0).
absl::StatusOr<int64_t> FloorDiv(int64_t a, int64_t b);
// Python's a % b (b != 0): the sign of the divisor.
int64_t FloorMod(int64_t a, int64_t b);
// int(d) for a float: toward zero; NaN, infinities and values past 64 bits are refused.
absl::StatusOr<Value> Truncate(double d);

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_INT_ARITH_H_
