#!/usr/bin/env python3
"""Last-token logits from Hugging Face transformers on the same safetensors: the independent
reference for the engines (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM as config.json
names them), float32, on the GPU when torch sees one.

Usage: hf_reference.py REQUEST.json OUTPUT.json
REQUEST: {"model_dir": ..., "sequences": [[token ids], ...]}
OUTPUT:  {"logits": [[float, ...], ...], "device": "cuda:0" | "cpu", "transformers": version}
Exit status 3 when torch or transformers is not installed (the caller skips)."""
import json
import sys


def main():
    try:
        import torch
        import transformers
    except ImportError as e:  # The caller reports the test skipped.
        print(f"hf_reference: {e}", file=sys.stderr)
        sys.exit(3)
    with open(sys.argv[1]) as f:
        request = json.load(f)
    # Strict float32 matmuls: the engines' checking mode has no TF32 either.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        request["model_dir"], torch_dtype=torch.float32, attn_implementation="eager")
    model.to(device).eval()
    rows = []
    with torch.no_grad():
        for seq in request["sequences"]:
            ids = torch.tensor([seq], dtype=torch.long, device=device)
            logits = model(input_ids=ids).logits[0, -1].double().cpu().tolist()
            rows.append(logits)
    with open(sys.argv[2], "w") as f:
        json.dump({"logits": rows, "device": device, "transformers": transformers.__version__}, f)


if __name__ == "__main__":
    main()
