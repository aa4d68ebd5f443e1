#!/usr/bin/env python3
"""Converts a pdserve (Hugging Face layout) Llama model directory to GGUF for llama.cpp.

Used by bench/llama_cpp/compare.sh to run llama.cpp on exactly the weights pdserve serves.
Reads config.json, model.safetensors (or its shards) and tokenizer.json; writes GGUF v3 with
the weights in --dtype (f16 by default; 1-D norm weights stay f32 as llama.cpp's own converter
keeps them), llama.* hyperparameters, and the byte-level BPE tokenizer (gpt2 model, the
Llama 3 pre-tokenizer "llama-bpe", tokens, merges, token types, BOS/EOS).

llama.cpp applies rotary embeddings to interleaved pairs while Hugging Face checkpoints use
rotate-half: the q and k projections' rows are permuted per head as llama.cpp's
convert_hf_to_gguf.py does (`permute`), so that both compute the same attention.

Usage: convert_to_gguf.py MODEL_DIR OUT.gguf [--dtype f16|bf16|f32]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# The shared safetensors reader.
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
from safetensors_numpy import load_weights  # noqa: E402

GGUF_MAGIC = 0x46554747  # "GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64 = 4, 5, 6, 7, 8, 9, 10
# ggml tensor types
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py permute(): rotate-half rows -> interleaved pairs."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def to_bf16_bits(a):
    """float32 -> bf16 bits, round to nearest even (as pdserve and PyTorch round)."""
    bits = a.astype(np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


class Writer:
    def __init__(self):
        self.kv = []       # bytes of each key/value
        self.tensors = []  # (name, shape (rows..., cols), ggml type, bytes)

    @staticmethod
    def _string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        out = self._string(key) + struct.pack("<I", vtype)
        out += self._value(vtype, value)
        self.kv.append(out)

    def add_array(self, key, elem_type, values):
        out = self._string(key) + struct.pack("<I", T_ARRAY)
        out += struct.pack("<IQ", elem_type, len(values))
        out += b"".join(self._value(elem_type, v) for v in values)
        self.kv.append(out)

    def _value(self, vtype, value):
        if vtype == T_UINT32:
            return struct.pack("<I", value)
        if vtype == T_INT32:
            return struct.pack("<i", value)
        if vtype == T_FLOAT32:
            return struct.pack("<f", value)
        if vtype == T_BOOL:
            return struct.pack("<?", value)
        if vtype == T_UINT64:
            return struct.pack("<Q", value)
        if vtype == T_STRING:
            return self._string(value)
        raise ValueError(vtype)

    def add_tensor(self, name, array, dtype):
        array = np.ascontiguousarray(array)
        if array.ndim == 1 or dtype == "f32":
            data, ggml = array.astype("<f4").tobytes(), GGML_F32
        elif dtype == "f16":
            data, ggml = array.astype("<f2").tobytes(), GGML_F16
        elif dtype == "bf16":
            data, ggml = to_bf16_bits(array).astype("<u2").tobytes(), GGML_BF16
        else:
            raise ValueError(dtype)
        self.tensors.append((name, array.shape, ggml, data))

    def write(self, path):
        infos, offset, blobs = [], 0, []
        for name, shape, ggml, data in self.tensors:
            dims = list(reversed(shape))  # ggml's ne[0] is the innermost dimension.
            info = self._string(name) + struct.pack("<I", len(dims))
            info += b"".join(struct.pack("<Q", d) for d in dims)
            info += struct.pack("<IQ", ggml, offset)
            infos.append(info)
            pad = (-len(data)) % ALIGNMENT
            blobs.append(data + b"\0" * pad)
            offset += len(data) + pad
        head = struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(self.tensors), len(self.kv))
        head += b"".join(self.kv) + b"".join(infos)
        head += b"\0" * ((-len(head)) % ALIGNMENT)
        with open(path, "wb") as f:
            f.write(head)
            for b in blobs:
                f.write(b)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
    args = p.parse_args()
    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "llama":
        sys.exit(f"only Llama models are converted here (model_type {cfg.get('model_type')})")
    if cfg.get("rope_scaling"):
        sys.exit("rope_scaling is not converted (use a preset without it)")
    with open(os.path.join(args.model_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    w = load_weights(args.model_dir)

    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hidden, head_dim = cfg["hidden_size"], cfg.get("head_dim", cfg["hidden_size"] // n_head)
    g = Writer()
    g.add("general.architecture", T_STRING, "llama")
    g.add("general.name", T_STRING, os.path.basename(os.path.normpath(args.model_dir)))
    g.add("general.alignment", T_UINT32, ALIGNMENT)
    g.add("general.file_type", T_UINT32, {"f32": 0, "f16": 1, "bf16": 32}[args.dtype])
    g.add("llama.vocab_size", T_UINT32, cfg["vocab_size"])
    g.add("llama.context_length", T_UINT32, cfg["max_position_embeddings"])
    g.add("llama.embedding_length", T_UINT32, hidden)
    g.add("llama.block_count", T_UINT32, cfg["num_hidden_layers"])
    g.add("llama.feed_forward_length", T_UINT32, cfg["intermediate_size"])
    g.add("llama.rope.dimension_count", T_UINT32, head_dim)
    g.add("llama.attention.head_count", T_UINT32, n_head)
    g.add("llama.attention.head_count_kv", T_UINT32, n_kv)
    g.add("llama.attention.key_length", T_UINT32, head_dim)
    g.add("llama.attention.value_length", T_UINT32, head_dim)
    g.add("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, cfg.get("rms_norm_eps", 1e-5))
    g.add("llama.rope.freq_base", T_FLOAT32, cfg.get("rope_theta", 10000.0))

    # Tokenizer: ids in order, base vocabulary then added tokens.
    vocab = tok["model"]["vocab"]
    tokens = [None] * cfg["vocab_size"]
    types = [1] * cfg["vocab_size"]  # 1 normal, 3 control, 5 unused
    for token, i in vocab.items():
        tokens[i] = token
    for added in tok.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = 3 if added.get("special") else 4
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", 5
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    g.add("tokenizer.ggml.model", T_STRING, "gpt2")
    g.add("tokenizer.ggml.pre", T_STRING, "llama-bpe")
    g.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    g.add_array("tokenizer.ggml.token_type", T_INT32, types)
    g.add_array("tokenizer.ggml.merges", T_STRING, merges)
    g.add("tokenizer.ggml.bos_token_id", T_UINT32, cfg["bos_token_id"])
    g.add("tokenizer.ggml.eos_token_id", T_UINT32, cfg["eos_token_id"])
    g.add("tokenizer.ggml.add_bos_token", T_BOOL, True)

    g.add_tensor("token_embd.weight", w["model.embed_tokens.weight"], args.dtype)
    for i in range(cfg["num_hidden_layers"]):
        hf, gg = f"model.layers.{i}.", f"blk.{i}."
        g.add_tensor(gg + "attn_norm.weight", w[hf + "input_layernorm.weight"], args.dtype)
        g.add_tensor(gg + "attn_q.weight", permute(w[hf + "self_attn.q_proj.weight"], n_head), args.dtype)
        g.add_tensor(gg + "attn_k.weight", permute(w[hf + "self_attn.k_proj.weight"], n_kv), args.dtype)
        g.add_tensor(gg + "attn_v.weight", w[hf + "self_attn.v_proj.weight"], args.dtype)
        g.add_tensor(gg + "attn_output.weight", w[hf + "self_attn.o_proj.weight"], args.dtype)
        g.add_tensor(gg + "ffn_norm.weight", w[hf + "post_attention_layernorm.weight"], args.dtype)
        g.add_tensor(gg + "ffn_gate.weight", w[hf + "mlp.gate_proj.weight"], args.dtype)
        g.add_tensor(gg + "ffn_up.weight", w[hf + "mlp.up_proj.weight"], args.dtype)
        g.add_tensor(gg + "ffn_down.weight", w[hf + "mlp.down_proj.weight"], args.dtype)
    g.add_tensor("output_norm.weight", w["model.norm.weight"], args.dtype)
    if not cfg.get("tie_word_embeddings", False):
        g.add_tensor("output.weight", w["lm_head.weight"], args.dtype)
    g.write(args.out)
    print(f"wrote {args.out}: {len(g.tensors)} tensors, {args.dtype}", file=sys.stderr)


if __name__ == "__main__":
    main()
