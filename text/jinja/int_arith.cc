#include "text/jinja/int_arith.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "text/jinja/errors.h"

namespace pdserve::text::jinja {

// Python's integers never overflow; ours are 64 bits, so a result that does not fit is an error
// naming the operation rather than a wrapped value (or, for signed overflow, undefined
// behaviour). No chat template computes numbers near 2^63.
absl::Status IntOverflow(absl::string_view op, int64_t a, int64_t b) {
  return Error(absl::StrCat("integer overflow: ", a, " ", op, " ", b, " does not fit in 64 bits"));
}

absl::StatusOr<int64_t> CheckedPow(int64_t base, int64_t exponent) {
  const int64_t original_base = base;
  int64_t result = 1;
  for (int64_t e = exponent; e > 0; e >>= 1) {
    if ((e & 1) != 0 && __builtin_mul_overflow(result, base, &result))
      return IntOverflow("**", original_base, exponent);
    // Squaring only while bits remain: if base^2 overflows then, so would the result, since
    // |base| >= 2 there and a later factor is at least base^2.
    if (e > 1 && __builtin_mul_overflow(base, base, &base))
      return IntOverflow("**", original_base, exponent);
  }
  return result;
}

// Python's floor division and modulo on integers (b != 0).
absl::StatusOr<int64_t> FloorDiv(int64_t a, int64_t b) {
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return IntOverflow("//", a, b);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's modulo (b != 0): the sign of the divisor; never overflows, unlike a - (a // b) * b.
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 traps in C++.
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// int(x) for a float: toward zero, refused (as Python refuses) for NaN, infinities and values
// past 64 bits, where the C++ conversion is undefined.
absl::StatusOr<Value> Truncate(double d) {
  // 2^63 is exact in a double; every double below it (and at or above -2^63) converts.
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (!(d > -kTwoTo63 - 1024.0 && d < kTwoTo63))
    return Error(absl::StrCat("int: cannot convert float ", d, " to a 64-bit integer"));
  return Value(static_cast<int64_t>(d));
}

}  // namespace pdserve::text::jinja
