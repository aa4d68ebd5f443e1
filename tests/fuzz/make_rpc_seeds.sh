#!/usr/bin/env bash
# Regenerates the rpc_request_fuzzer seeds from text-format messages (protoc --encode):
# each seed is the selector byte of its request type followed by the binary message.
set -euo pipefail
cd "$(dirname "$0")/seeds/rpc"
root=../../../../proto
seed() {  # seed NAME SELECTOR TYPE FILE TEXT
  { printf "\\x$(printf %02x "$2")"; printf '%s' "$5" | protoc -I "$root" --encode="$3" "$root/$4"; } > "$1.bin"
}
seed generate_text 0 pdserve.v1.GenerateRequest pdserve/v1/generation.proto \
  'request_id: "r1" text: "the theme" sampling { max_tokens: 8 temperature: 0.7 top_k: 5 }'
seed generate_ids 0 pdserve.v1.GenerateRequest pdserve/v1/generation.proto \
  'token_ids { ids: [1, 2, 3, 299] } sampling { max_tokens: 4 stop: "x" }'
seed decode 1 pdserve.v1.DecodeRequest pdserve/v1/decode.proto \
  'request { token_ids { ids: [5, 6] } } arrival_unix_nanos: 1700000000000000000 prefill_workers { worker_id: "p" address: "127.0.0.1:1" }'
seed prefill 2 pdserve.v1.PrefillRequest pdserve/v1/prefill.proto \
  'request_id: "p1" token_ids: [1, 2, 3, 4] target { receiver_id: "d" ucx_worker_address: "x" packed_rkey: "k" pool_base_address: 4096 layout { num_layers: 2 num_kv_heads: 1 head_dim: 8 block_size: 16 dtype: DTYPE_F32 num_blocks: 10 } block_ids: [0] num_tokens: 4 transfer_token: 7 epoch: 1 }'
seed registration 3 pdserve.v1.WorkerMessage pdserve/v1/registry.proto \
  'registration { worker_id: "decode-0" role: WORKER_ROLE_DECODE grpc_address: "127.0.0.1:5" model: "m" model_fingerprint: 9 kv_layout { num_layers: 2 num_kv_heads: 1 head_dim: 8 block_size: 16 dtype: DTYPE_F32 num_blocks: 10 } epoch: 3 max_context_tokens: 4096 vocab_size: 300 }'
