#include "engine/cpu/cpu_isa.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/half.h"

namespace pdserve::engine {
namespace {

bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
  return has;
#else
  return false;
#endif
}

bool HasAvx512() {
#if defined(__x86_64__)
  static const bool has = HasAvx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return has;
#else
  return false;
#endif
}

bool HasNeon() {
#if defined(__aarch64__)
  return true;  // Advanced SIMD is mandatory in AArch64.
#else
  return false;
#endif
}

bool IsX86(CpuIsa isa) { return isa == CpuIsa::kAvx2 || isa == CpuIsa::kAvx512; }

// Every set, each after those it implies (so reversed, a CPU's supported ones come best first).
constexpr CpuIsa kAllIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kNeon};

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kNeon:
      return "neon";
  }
  return "?";
}

absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name, absl::string_view flag) {
  if (name == "auto") return DefaultCpuIsa();
  for (CpuIsa isa : kAllIsas) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": '", name, "' is not one of auto, avx512, avx2, neon, scalar"));
}

bool CpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return HasAvx2();
    case CpuIsa::kAvx512:
      return HasAvx512();
    case CpuIsa::kNeon:
      return HasNeon();
  }
  return false;
}

absl::Status CheckCpuSupports(CpuIsa isa) {
  if (CpuSupports(isa)) return absl::OkStatus();
  const char* needs = isa == CpuIsa::kAvx2     ? "AVX2, FMA and F16C"
                      : isa == CpuIsa::kAvx512 ? "AVX-512 F, DQ, BW and VL"
                                               : "AArch64's Advanced SIMD";
  return absl::FailedPreconditionError(
      absl::StrCat("cpu_isa ", CpuIsaName(isa), " needs ", needs, ", which this CPU (",
                   CpuModelName().empty() ? "unknown" : CpuModelName(), ") lacks; its best is ",
                   CpuIsaName(BestCpuIsa())));
}

absl::StatusOr<CpuIsa> DefaultCpuIsa() {
  // Read here only: the one setting of the process environment the engine honours (as
  // oneDNN's ONEDNN_MAX_CPU_ISA), so that a whole test suite or deployment can be run on a
  // lower instruction set without a flag on every binary.
  const char* cap = std::getenv(kMaxCpuIsaEnv);
  const CpuIsa best = BestCpuIsa();
  if (cap == nullptr || *cap == '\0') return best;
  for (CpuIsa isa : kAllIsas) {
    if (absl::string_view(cap) != CpuIsaName(isa)) continue;
    if (isa == CpuIsa::kScalar) return isa;
    if (IsX86(isa) != IsX86(best) || best == CpuIsa::kScalar)
      return best;  // Another architecture's.
    return std::min(isa, best);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(kMaxCpuIsaEnv, ": '", cap, "' is not one of avx512, avx2, neon, scalar"));
}

CpuIsa BestCpuIsa() {
  if (HasNeon()) return CpuIsa::kNeon;
  if (HasAvx512()) return CpuIsa::kAvx512;
  if (HasAvx2()) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> out;
  for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {  // Best first.
    if (CpuSupports(*it)) out.push_back(*it);
  }
  return out;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    // x86: "model name : AMD EPYC ..."; some Arm kernels: "Model name" or "Hardware".
    if (absl::StartsWithIgnoreCase(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "";
}

}  // namespace pdserve::engine
