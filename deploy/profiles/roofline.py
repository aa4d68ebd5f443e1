#!/usr/bin/env python3
"""Writes roofline cost models for GPU deployments, in the router's cost_model.json format.

These are estimates from published hardware figures, not measurements: pdserve's CUDA backend
has not run on these GPUs yet (issue: CUDA backend). A profile stands in for what
`pdserve-bench interference` would write on that machine, for the cluster simulator and for a
router started before any calibration (its online refinement corrects it from the first
steps). Replace a profile with a measured one as soon as there is one.

The model, per GPU (one model replica per GPU; the 70B profiles assume tensor parallelism over
`tp` GPUs, so a step reads 1/tp of the weights and KV per GPU and does 1/tp of the FLOPs, plus
an all-reduce term per layer):
  step (ms)     = intercept + per_decode * D + per_prefill_token * P + per_attention * A
    intercept          weight bytes / HBM bandwidth (a step reads every weight once)
                       + a fixed launch/sync cost per step
    per_decode         2 * params / peak dense BF16 FLOP/s (the token's GEMM work)
    per_prefill_token  the same
    per_attention      K and V bytes of one position (all layers) / HBM bandwidth
  prefill (ms)  = overhead + per_token * L + per_token_squared * L^2
    per_token          2 * params / peak
    per_token_squared  causal attention FLOPs per L^2 (2 * layers * q_dim * 2 / 2) / peak
  transfer tail = latency + one layer's bytes / NIC bandwidth (RDMA, one 400 Gb/s port)
The "cluster" object is the shape of one worker (a model replica over `gpus_per_worker` GPUs)
for `pdserve-sim`: its KV layout, and KV blocks from the HBM left after the weights (90 % of
it usable); the router ignores the object.

Usage: roofline.py [--check]   (--check: fail if the committed files differ from what this
writes)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Published figures (dense, no sparsity): NVIDIA H100 SXM5 80 GB and H200 141 GB datasheets.
GPUS = {
    "h100": {"name": "NVIDIA H100 SXM5 80GB", "hbm_bytes_per_s": 3.35e12, "bf16_flops": 989e12,
             "hbm_bytes": 80e9},
    "h200": {"name": "NVIDIA H200 141GB", "hbm_bytes_per_s": 4.8e12, "bf16_flops": 989e12,
             "hbm_bytes": 141e9},
}
# Llama 3.1 shapes (config.json of meta-llama/Llama-3.1-8B and -70B), bf16 weights and KV.
MODELS = {
    "llama3-8b": {"params": 8.03e9, "layers": 32, "hidden": 4096, "kv_heads": 8,
                  "head_dim": 128, "tp": 1, "vocab": 128256, "context": 131072},
    "llama3-70b": {"params": 70.6e9, "layers": 80, "hidden": 8192, "kv_heads": 8,
                   "head_dim": 128, "tp": 4, "vocab": 128256, "context": 131072},
}
HBM_USABLE = 0.9  # What the engine leaves itself for weights and KV.
BLOCK_SIZE = 16
MAX_NUM_BATCHED_TOKENS = 2048  # Step token budget (vLLM's chunked-prefill default).
MAX_NUM_SEQS = 256
PREFILL_MAX_BATCH_TOKENS = 16384
BYTES = 2  # bf16
STEP_FIXED_MS = 0.3  # Kernel launches and host synchronisation per step, without graphs.
ALLREDUCE_MS_PER_LAYER = 0.02  # Two NVLink all-reduces of a decode-sized activation.
NIC_BYTES_PER_S = 50e9  # One 400 Gb/s RDMA port.
NIC_LATENCY_MS = 0.05


def profile(gpu_key, model_key):
    g, m = GPUS[gpu_key], MODELS[model_key]
    tp = m["tp"]
    weight_bytes = m["params"] * BYTES / tp
    flops_per_token = 2 * m["params"] / tp
    kv_bytes_per_position = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * BYTES / tp
    attention_flops_per_l2 = 2 * m["layers"] * m["hidden"] * 2 / 2 / tp
    ms = 1e3
    allreduce = ALLREDUCE_MS_PER_LAYER * m["layers"] if tp > 1 else 0.0
    return {
        "description": (
            f"Roofline ESTIMATE, not a measurement: {model_key} (bf16) on {g['name']}"
            f"{f' x{tp} (tensor parallel)' if tp > 1 else ''}. Written by "
            "deploy/profiles/roofline.py from published hardware figures; replace with the "
            "cost_model.json that `pdserve-bench interference --backend=cuda` writes on the "
            "machine. Format: deploy/cost_model.json."),
        "calibration": {
            "source": (f"roofline: HBM {g['hbm_bytes_per_s'] / 1e12:g} TB/s, dense BF16 "
                       f"{g['bf16_flops'] / 1e12:g} TFLOP/s, {m['params'] / 1e9:g}B parameters, "
                       f"tp={tp}; step fixed cost {STEP_FIXED_MS} ms"
                       f"{f', all-reduce {ALLREDUCE_MS_PER_LAYER} ms/layer' if tp > 1 else ''}; "
                       f"RDMA {NIC_BYTES_PER_S * 8 / 1e9:g} Gb/s"),
            "date": "2026-11-24",
        },
        "step": {
            "intercept_ms": round(weight_bytes / g["hbm_bytes_per_s"] * ms + STEP_FIXED_MS
                                  + allreduce, 6),
            "per_decode_ms": float(f"{flops_per_token / g['bf16_flops'] * ms:.6g}"),
            "per_prefill_token_ms": float(f"{flops_per_token / g['bf16_flops'] * ms:.6g}"),
            "per_attention_ms": float(f"{kv_bytes_per_position / g['hbm_bytes_per_s'] * ms:.6g}"),
            # A prefill chunk's attention is compute-bound (4 FLOPs per head dim per layer per
            # (query, position) pair) while a decode's is memory-bound (per_attention_ms).
            "per_prefill_attention_ms": float(
                f"{4 * m['layers'] * m['hidden'] / tp / g['bf16_flops'] * ms:.6g}"),
        },
        "prefill": {
            "overhead_ms": round(STEP_FIXED_MS + allreduce, 6),
            "per_token_ms": float(f"{flops_per_token / g['bf16_flops'] * ms:.6g}"),
            "per_token_squared_ms": float(f"{attention_flops_per_l2 / g['bf16_flops'] * ms:.6g}"),
        },
        "transfer": {
            "latency_ms": NIC_LATENCY_MS,
            "bytes_per_ms": NIC_BYTES_PER_S / ms,
        },
        "offload_overhead_ms": 2.0,
        "online": {"forgetting": 0.995, "prior_variance": 100.0},
        "cluster": cluster(g, m),
    }


def cluster(g, m):
    tp = m["tp"]
    kv_bytes_per_token = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * BYTES
    kv_bytes = g["hbm_bytes"] * HBM_USABLE * tp - m["params"] * BYTES
    return {
        "gpus_per_worker": tp,
        "num_layers": m["layers"],
        "num_kv_heads": m["kv_heads"],
        "head_dim": m["head_dim"],
        "dtype": "bf16",
        "block_size": BLOCK_SIZE,
        "kv_blocks": int(kv_bytes // kv_bytes_per_token // BLOCK_SIZE),
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        "max_num_seqs": MAX_NUM_SEQS,
        "max_context_tokens": m["context"],
        "prefill_max_batch_tokens": PREFILL_MAX_BATCH_TOKENS,
        "vocab_size": m["vocab"],
    }


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for gpu_key in GPUS:
        for model_key in MODELS:
            path = os.path.join(HERE, f"{gpu_key}-{model_key}.json")
            text = json.dumps(profile(gpu_key, model_key), indent=2) + "\n"
            if check:
                if not os.path.exists(path) or open(path).read() != text:
                    stale.append(path)
            else:
                with open(path, "w") as f:
                    f.write(text)
                print(f"wrote {path}")
    if stale:
        sys.exit("roofline.py: stale (run deploy/profiles/roofline.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
