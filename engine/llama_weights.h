// Reading a Llama-family checkpoint's tensors into float32 host buffers in the layout every
// backend's forward pass uses: q/k/v and gate/up projections fused ([q_dim + 2 kv_dim,
// hidden] and [2 intermediate, hidden], rows of the first then the next), optional biases and
// q/k norms as the config says. Backends convert and place them (the CPU engine packs them
// for its GEMM, the CUDA engine uploads them). Also the rotary embedding's inverse
// frequencies, with the config's scaling.
// Thread-safety: functions of their arguments; the checkpoint is read by one thread.
#ifndef PDSERVE_ENGINE_LLAMA_WEIGHTS_H_
#define PDSERVE_ENGINE_LLAMA_WEIGHTS_H_

#include <vector>

#include "absl/status/status.h"
#include "common/model_config.h"
#include "engine/checkpoint.h"

namespace pdserve::engine {

struct LlamaLayerWeights {
  std::vector<float> input_norm, post_norm;  // [hidden]
  std::vector<float> q_norm, k_norm;         // [head_dim] when config.qk_norm
  std::vector<float> qkv;                    // [q_dim + 2 kv_dim, hidden]
  std::vector<float> qkv_bias;               // [q_dim + 2 kv_dim] when config.qkv_bias
  std::vector<float> o;                      // [hidden, q_dim]
  std::vector<float> o_bias;                 // [hidden] when config.o_bias
  std::vector<float> gate_up;                // [2 intermediate, hidden]
  std::vector<float> gate_up_bias;           // [2 intermediate] when config.mlp_bias
  std::vector<float> down;                   // [hidden, intermediate]
  std::vector<float> down_bias;              // [hidden] when config.mlp_bias
};

// Layer `layer`'s tensors (model.layers.<layer>.*).
absl::Status ReadLlamaLayer(Checkpoint& checkpoint, int layer, LlamaLayerWeights* out);

// The embedding table [vocab, hidden], the final norm [hidden] and the LM head [vocab,
// hidden] (the embedding table when tied; a tied copy in the checkpoint is read and ignored).
absl::Status ReadLlamaEmbeddings(Checkpoint& checkpoint, std::vector<float>* embed,
                                 std::vector<float>* final_norm, std::vector<float>* lm_head);

// Inverse frequencies of the rotary embedding, [head_dim / 2], with linear or Llama 3 scaling.
std::vector<double> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_LLAMA_WEIGHTS_H_
