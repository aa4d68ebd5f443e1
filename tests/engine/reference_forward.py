#!/usr/bin/env python3
"""Independent NumPy reference of the Llama-family forward pass (tests only).

Reads a Hugging Face model directory (config.json + safetensors, sharded or not) with its own
safetensors parser, and computes, in float64, the logits of the last token of each sequence
given in the request, with plain full causal attention (no paging, no batching, no chunking).

With "weight_dtype" "bf16" or "f16" in the request, every matrix (2-D tensor) is first rounded
to that type (round to nearest even), as the engine stores them with --weight_dtype; norms and
biases stay as they are.

Usage: reference_forward.py REQUEST.json OUTPUT.json
  request: {"model_dir": "...", "sequences": [[token ids], ...], "weight_dtype": optional}
  output:  {"logits": [[float, ...], ...]}   one row per sequence
"""
import json
import math
import os
import sys

import numpy as np

# The shared safetensors reader.
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
from safetensors_numpy import load_weights as load_float32_weights  # noqa: E402


def load_weights(model_dir):
    return {k: v.astype(np.float64) for k, v in load_float32_weights(model_dir).items()}


def round_matrices(weights, dtype):
    """Rounds every 2-D tensor to bf16 or f16 and back (round to nearest even)."""
    out = {}
    for name, w in weights.items():
        if w.ndim != 2:
            out[name] = w
        elif dtype == "f16":
            out[name] = w.astype(np.float32).astype(np.float16).astype(np.float64)
        elif dtype == "bf16":
            bits = w.astype(np.float32).view(np.uint32)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            out[name] = bits.astype(np.uint32).view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"weight_dtype {dtype}")
    return out


def inv_freq(cfg, head_dim):
    theta = cfg.get("rope_theta", 10000.0)
    freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = cfg.get("rope_scaling")
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        factor = scaling["factor"]
        if kind == "linear":
            freq = freq / factor
        elif kind == "llama3":
            old = scaling["original_max_position_embeddings"]
            low_wavelen = old / scaling["low_freq_factor"]
            high_wavelen = old / scaling["high_freq_factor"]
            out = []
            for f in freq:
                wavelen = 2 * math.pi / f
                if wavelen > low_wavelen:
                    out.append(f / factor)
                elif wavelen < high_wavelen:
                    out.append(f)
                else:
                    smooth = (old / wavelen - scaling["low_freq_factor"]) / (
                        scaling["high_freq_factor"] - scaling["low_freq_factor"])
                    out.append((1 - smooth) * f / factor + smooth * f)
            freq = np.array(out)
    return freq


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, freq):
    # x: [T, heads, head_dim]; rotate-half convention.
    half = x.shape[-1] // 2
    angles = positions[:, None] * freq[None, :]          # [T, half]
    cos = np.cos(angles)[:, None, :]
    sin = np.sin(angles)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def forward_last_logits(cfg, w, tokens):
    arch = cfg["architectures"][0]
    h = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_heads)
    head_dim = cfg.get("head_dim") or h // n_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    qkv_bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    o_bias = arch != "Qwen2ForCausalLM" and cfg.get("attention_bias", False)
    qk_norm = arch == "Qwen3ForCausalLM"
    freq = inv_freq(cfg, head_dim)
    T = len(tokens)
    positions = np.arange(T, dtype=np.float64)
    x = w["model.embed_tokens.weight"][np.array(tokens)]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        hn = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = hn @ w[p + "self_attn.q_proj.weight"].T
        k = hn @ w[p + "self_attn.k_proj.weight"].T
        v = hn @ w[p + "self_attn.v_proj.weight"].T
        if qkv_bias:
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        q = q.reshape(T, n_heads, head_dim)
        k = k.reshape(T, n_kv, head_dim)
        v = v.reshape(T, n_kv, head_dim)
        if qk_norm:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = rope(q, positions, freq)
        k = rope(k, positions, freq)
        group = n_heads // n_kv
        out = np.zeros((T, n_heads, head_dim))
        for hq in range(n_heads):
            kh = hq // group
            scores = q[:, hq, :] @ k[:, kh, :].T / math.sqrt(head_dim) + mask
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs = probs / probs.sum(axis=-1, keepdims=True)
            out[:, hq, :] = probs @ v[:, kh, :]
        o = out.reshape(T, n_heads * head_dim) @ w[p + "self_attn.o_proj.weight"].T
        if o_bias:
            o = o + w[p + "self_attn.o_proj.bias"]
        x = x + o
        hn = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = hn @ w[p + "mlp.gate_proj.weight"].T
        up = hn @ w[p + "mlp.up_proj.weight"].T
        act = gate / (1.0 + np.exp(-gate)) * up
        x = x + act @ w[p + "mlp.down_proj.weight"].T
    last = rms_norm(x[-1], w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return head @ last


def main():
    with open(sys.argv[1]) as f:
        request = json.load(f)
    model_dir = request["model_dir"]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = load_weights(model_dir)
    if request.get("weight_dtype") in ("bf16", "f16"):
        weights = round_matrices(weights, request["weight_dtype"])
    rows = [forward_last_logits(cfg, weights, seq).tolist() for seq in request["sequences"]]
    with open(sys.argv[2], "w") as f:
        json.dump({"logits": rows}, f)


if __name__ == "__main__":
    main()
