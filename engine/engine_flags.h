// The command-line flags that choose and tune the engine backend (--backend, --threads,
// --weight_dtype, --cpu_isa, the CUDA and emulated backends' flags), defined once for every
// binary that loads a model (the workers, pdserve-generate).
// Thread-safety: call from main() after ParseCommandLine.
#ifndef PDSERVE_ENGINE_ENGINE_FLAGS_H_
#define PDSERVE_ENGINE_ENGINE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/model_loader.h"

namespace pdserve::engine {

// The flags as EngineOptions; `timing` is the emulated backend's ("decode" or "prefill": the
// worker's role) and `kv_dtype` the pool's element type. Errors name the flag.
absl::StatusOr<EngineOptions> EngineOptionsFromFlags(const std::string& timing, DType kv_dtype);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_ENGINE_FLAGS_H_
