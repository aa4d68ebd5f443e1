// Which SIMD instruction set the CPU kernels run on. A model is built for one instruction set
// (CpuModelOptions::isa, the workers' --cpu_isa): by default the best this CPU has, or a lower
// one on request, so that every path can be run and tested on any machine that has it (an
// AVX-512 machine runs the AVX2 and scalar paths too) and a deployment can pin one.
// Each kernel keeps a fixed order of operations within its instruction set, so a sequence's
// results never depend on its batch; results differ (slightly) between instruction sets.
// Thread-safety: stateless (the CPU's features are read once).
#ifndef PDSERVE_ENGINE_CPU_CPU_ISA_H_
#define PDSERVE_ENGINE_CPU_CPU_ISA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve::engine {

// Ordered within an architecture: a CPU that runs one runs every lower one of its own
// architecture (and scalar).
enum class CpuIsa : uint8_t {
  kScalar,  // Portable C++: any CPU.
  kAvx2,    // x86-64 with AVX2, FMA and F16C (Haswell, Zen 1-3 and later).
  kAvx512,  // x86-64 with AVX-512 F, DQ, BW and VL (Skylake-SP, Ice Lake, Zen 4 and later).
  kNeon,    // AArch64's Advanced SIMD (every 64-bit Arm CPU: Graviton, Ampere, Apple silicon).
};

// "scalar", "avx2", "avx512", "neon".
const char* CpuIsaName(CpuIsa isa);
// Parses a name as CpuIsaName writes it; "auto" gives DefaultCpuIsa(). The error names `flag`
// and the choices.
absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name, absl::string_view flag = "cpu_isa");
// Whether this CPU (and OS) can run `isa`.
bool CpuSupports(CpuIsa isa);
// OK, or FAILED_PRECONDITION naming what this CPU lacks.
absl::Status CheckCpuSupports(CpuIsa isa);
// The best instruction set this CPU runs.
CpuIsa BestCpuIsa();
// The environment variable that caps "auto" (DefaultCpuIsa), e.g. PDSERVE_MAX_CPU_ISA=avx2
// runs every model of the process on AVX2 on an AVX-512 machine (tests of the lower paths).
// A cap that names another architecture's set caps nothing ("avx2" on Arm); "scalar" caps
// every architecture.
inline constexpr char kMaxCpuIsaEnv[] = "PDSERVE_MAX_CPU_ISA";
// What "auto" means: BestCpuIsa(), capped by $PDSERVE_MAX_CPU_ISA when it is set (an unknown
// name there is INVALID_ARGUMENT).
absl::StatusOr<CpuIsa> DefaultCpuIsa();
// Every instruction set this CPU runs, best first (tests run each).
std::vector<CpuIsa> SupportedCpuIsas();
// The CPU's model name (/proc/cpuinfo), e.g. "AMD EPYC 7B13"; empty when unknown. Benchmarks
// print it beside their figures.
std::string CpuModelName();

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_CPU_ISA_H_
