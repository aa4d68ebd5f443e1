// Model fixtures for tests: small random-weight checkpoints written once per build tree
// (under <build>/test-models/) by the same code as pdserve-make-model, and a runner for the
// independent NumPy reference forward pass.
// Thread-safety: TestModelDir is safe across processes (atomic rename on first write).
#ifndef PDSERVE_TESTS_TESTING_TEST_MODELS_H_
#define PDSERVE_TESTS_TESTING_TEST_MODELS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/make_model/model_maker.h"

namespace pdserve::testing {

// Variants: "tiny" (Llama, f32), "tiny-qwen2" (q/k/v biases), "tiny-qwen3" (q/k norm),
// "tiny-tied-bf16" (tied embeddings, bf16 weights, Llama-3 rope scaling),
// "tiny-f16-sharded" (f16 weights in 3 shards), "micro" (2 layers, hidden 64: fastest).
tools::ModelSpec TestModelSpec(const std::string& variant);
// Writes the variant on first use and returns its directory.
std::string TestModelDir(const std::string& variant);

// Runs tests/engine/reference_forward.py: float64 logits of the last token of each sequence.
// `weight_dtype` "bf16" or "f16" rounds the model's matrices first, as the engine stores them.
absl::StatusOr<std::vector<std::vector<double>>> ReferenceLastLogits(
    const std::string& model_dir, const std::vector<std::vector<int32_t>>& sequences,
    const std::string& weight_dtype = "");

// Runs tests/engine/hf_reference.py (Hugging Face transformers, float32, on the GPU when torch
// sees one) with $PDSERVE_TORCH_PYTHON or the python3 on PATH: the last token's logits of each
// sequence. UNAVAILABLE when torch or transformers is not installed.
absl::StatusOr<std::vector<std::vector<double>>> HuggingFaceLastLogits(
    const std::string& model_dir, const std::vector<std::vector<int32_t>>& sequences);

// max |a - b| / max |b|: the relative error of a logits row against its reference.
double MaxRelativeError(const std::vector<float>& ours, const std::vector<double>& reference);

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_TEST_MODELS_H_
