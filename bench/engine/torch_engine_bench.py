#!/usr/bin/env python3
"""PyTorch beside pdserve-bench engine --backend=cuda: the same model directory (safetensors,
config.json), the same shapes, the same GPU. Hugging Face transformers with SDPA attention,
eager and torch.compile (where it works: a failure is recorded, not hidden).

Measures decode tokens/s at a batch size (default 64, context 128, greedy) and prefill tokens/s
at a length (default 2048), median of --repetitions, and writes a table and JSON.

  python3 bench/engine/torch_engine_bench.py --model models/8b --out runs/torch-8b
"""
import argparse
import json
import os
import statistics
import sys
import time


def timed(torch, fn, repetitions):
    fn()  # Warm-up (and, compiled, the compilation).
    torch.cuda.synchronize()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def measure(torch, model, args, vocab):
    gen = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(0, vocab, (1, args.prefill_tokens), generator=gen).cuda()
    contexts = torch.randint(0, vocab, (args.decode_batch, args.decode_context), generator=gen).cuda()
    out = {}

    def prefill():
        with torch.no_grad():
            model(input_ids=prompt, use_cache=False)

    med, lo, hi = timed(torch, prefill, args.repetitions)
    out["prefill_tokens_per_s"] = args.prefill_tokens / med
    out["prefill_ms"] = {"median": med * 1e3, "min": lo * 1e3, "max": hi * 1e3}

    def generate(n):
        def run():
            with torch.no_grad():
                model.generate(input_ids=contexts, attention_mask=torch.ones_like(contexts),
                               max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               cache_implementation=args.cache, pad_token_id=0)
        return run

    one, _, _ = timed(torch, generate(1), args.repetitions)
    many, _, _ = timed(torch, generate(1 + args.decode_steps), args.repetitions)
    step = (many - one) / args.decode_steps  # Generation's prefill cancels out.
    out["decode_step_ms"] = step * 1e3
    out["decode_tokens_per_s"] = args.decode_batch / step
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory (config.json, safetensors)")
    parser.add_argument("--out", required=True, help="directory for summary.json")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16, float16 or float32")
    parser.add_argument("--decode_batch", type=int, default=64)
    parser.add_argument("--decode_context", type=int, default=128)
    parser.add_argument("--decode_steps", type=int, default=32)
    parser.add_argument("--prefill_tokens", type=int, default=2048)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--cache", default="static", help="generate()'s cache_implementation")
    args = parser.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"torch_engine_bench: {e}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_engine_bench: no GPU visible to torch", file=sys.stderr)
        return 3
    dtype = getattr(torch, args.dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, torch_dtype=dtype, attn_implementation="sdpa").cuda().eval()
    vocab = model.config.vocab_size
    results = {"eager": measure(torch, model, args, vocab)}
    try:
        model.forward = torch.compile(model.forward, mode="reduce-overhead")
        results["compile"] = measure(torch, model, args, vocab)
    except Exception as e:  # Recorded: "where it works".
        results["compile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    summary = {
        "bench": "torch_engine",
        "model": args.model,
        "dtype": args.dtype,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "decode_batch": args.decode_batch,
        "decode_context": args.decode_context,
        "prefill_tokens": args.prefill_tokens,
        "results": results,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"{'mode':8}  {'decode tok/s (b=%d)' % args.decode_batch:>22}  "
          f"{'prefill tok/s (%d)' % args.prefill_tokens:>20}")
    for mode, r in results.items():
        if "error" in r:
            print(f"{mode:8}  failed: {r['error'][:100]}")
        else:
            print(f"{mode:8}  {r['decode_tokens_per_s']:22.0f}  {r['prefill_tokens_per_s']:20.0f}")
    print(f"summary: {args.out}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
