#!/usr/bin/env python3
"""pdserve against llama.cpp on the same half-precision checkpoint, side by side.

1. Makes the random-weight `small` preset in f16 (pdserve-make-model --dtype=f16) unless given
   a model, converts it to GGUF f16 (convert_to_gguf.py: the same values, q/k rows permuted for
   llama.cpp's rotary layout) and installs node-llama-cpp (pinned; its prebuilt llama.cpp) into
   the output directory.
2. Checks greedy equality first: for several prompts, pdserve-generate's token ids against
   llama.cpp's (llama_cpp_run.mjs greedy). A run whose tokens differ is reported with the
   first differing position.
3. Times both, alternating, for each thread count: pdserve-bench engine (decode step at batch
   1 and 8, prefill of 2048 tokens) and llama_cpp_run.mjs time (the same measurements), and
   reports llama.cpp time / pdserve time (above 1: pdserve faster) per run, with the median
   and spread over runs. At batch 1 llama.cpp's time is its own eval time per step
   (llama_perf_context), without node-llama-cpp's per-token JavaScript (~1 ms a token here),
   which would flatter pdserve; decode_b1_wall gives the ratio with the wall time too.

Usage: compare.py [--out DIR] [--model DIR] [--runs 3] [--threads 1,2] [--build build]
Writes DIR/summary.json and prints a table. Needs network access to npm for the first run.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NODE_LLAMA_CPP = "3.22.1"
PYTHON = "/usr/bin/python3"  # Debian's, with NumPy (a pyenv shim may come first on PATH).


def run(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def setup(args):
    os.makedirs(args.out, exist_ok=True)
    tools = os.path.join(args.out, "tools")
    if not os.path.exists(os.path.join(tools, "node_modules", "node-llama-cpp")):
        os.makedirs(tools, exist_ok=True)
        env = dict(os.environ, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true")
        run(["npm", "install", "--prefix", tools, "--no-audit", "--no-fund", "--loglevel=error",
             f"node-llama-cpp@{NODE_LLAMA_CPP}"], env=env)
    model = args.model
    if not model:
        model = os.path.join(ROOT, "models", "small-f16")
        if not os.path.exists(os.path.join(model, "config.json")):
            run([os.path.join(args.build, "bin", "pdserve-make-model"), "--preset=small",
                 "--dtype=f16", f"--out={model}"])
    gguf = os.path.join(args.out, os.path.basename(os.path.normpath(model)) + ".gguf")
    if not os.path.exists(gguf):
        run([PYTHON, os.path.join(HERE, "convert_to_gguf.py"), model, gguf, "--dtype", "f16"])
    return os.path.join(tools, "node_modules"), model, gguf


def llama(node_modules, gguf, mode, **opts):
    out = run(["node", os.path.join(HERE, "llama_cpp_run.mjs"), node_modules, gguf, mode]
              + [f"{k}={v}" for k, v in opts.items()])
    return json.loads(out.strip().splitlines()[-1])


def greedy_check(args, node_modules, model, gguf, vocab):
    results = []
    rng = random.Random(2026)
    for p in range(args.prompts):
        prompt = [rng.randrange(16, vocab - 16) for _ in range(24)]
        out = run([os.path.join(args.build, "bin", "pdserve-generate"), f"--model={model}",
                   "--prompt_ids=" + ",".join(map(str, prompt)), f"--max_tokens={args.tokens}",
                   "--print_ids", "--threads=1", "--ignore_eos"])
        ids_line = [l for l in out.splitlines() if l.startswith("ids: ")][-1]
        ours = [int(t) for t in ids_line[5:].split(",")]
        theirs = llama(node_modules, gguf, "greedy", prompt=",".join(map(str, prompt)),
                       tokens=args.tokens, threads=1)["tokens"]
        first_diff = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        results.append({"prompt": p, "equal": ours == theirs, "first_difference": first_diff,
                        "pdserve": ours, "llama_cpp": theirs})
        print(f"prompt {p}: {'equal' if ours == theirs else f'first difference at {first_diff}'}",
              file=sys.stderr)
    return results


def pdserve_times(args, model, threads, run_index):
    out_dir = os.path.join(args.out, f"pdserve-t{threads}-r{run_index}")
    run([os.path.join(args.build, "bin", "pdserve-bench"), "engine", f"--model={model}",
         f"--out={out_dir}", f"--threads={threads}", "--decode_batches=1,8",
         "--prefill_tokens=2048"])
    with open(os.path.join(out_dir, "summary.json")) as f:
        s = json.load(f)
    t = s["per_thread_count"][0]
    return {"prefill_ms": t["prefill"]["2048"]["ms"], "decode_b1_ms": t["decode_ms"]["1"],
            "decode_b8_ms": t["decode_ms"]["8"], "weight_dtype": s.get("weight_dtype")}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench-out/llama-cpp")
    p.add_argument("--model", default="")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    args = p.parse_args()
    node_modules, model, gguf = setup(args)
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    summary = {"model": model, "gguf": gguf, "node_llama_cpp": NODE_LLAMA_CPP,
               "greedy": greedy_check(args, node_modules, model, gguf, vocab), "runs": []}
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        ratios = {"decode_b1": [], "decode_b1_wall": [], "decode_b8": [], "prefill_2048": []}
        for r in range(args.runs):
            ours = pdserve_times(args, model, threads, r)
            theirs = llama(node_modules, gguf, "time", threads=threads, prefill=2048, context=128,
                           steps=16, repeats=3)
            summary["llama_cpp"] = theirs["llama_cpp"]
            summary["llama_cpp_cpu_backend"] = theirs.get("cpu_backend")
            summary["llama_cpp_cpu_features"] = theirs.get("cpu_features")
            b1_eval = theirs.get("decode_b1_eval_ms") or theirs["decode_b1_ms"]
            ratio = {"decode_b1": b1_eval / ours["decode_b1_ms"],
                     "decode_b1_wall": theirs["decode_b1_ms"] / ours["decode_b1_ms"],
                     "decode_b8": theirs["decode_b8_ms"] / ours["decode_b8_ms"],
                     "prefill_2048": theirs["prefill_ms"] / ours["prefill_ms"]}
            for k, v in ratio.items():
                ratios[k].append(v)
            summary["runs"].append({"threads": threads, "run": r, "pdserve": ours,
                                    "llama_cpp": theirs, "speedup": ratio})
            print(f"threads {threads} run {r}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()),
                  file=sys.stderr)
        for k, v in ratios.items():
            med = statistics.median(v)
            summary[f"speedup_{k}_t{threads}"] = {"median": med, "min": min(v), "max": max(v)}
            rows.append((threads, k, med, min(v), max(v)))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    equal = sum(g["equal"] for g in summary["greedy"])
    print(f"pdserve vs llama.cpp ({summary.get('llama_cpp')}, node-llama-cpp {NODE_LLAMA_CPP}) on "
          f"{model} (f16): greedy tokens equal on {equal} of {len(summary['greedy'])} prompts "
          f"({args.tokens} tokens each); llama.cpp CPU backend "
          f"{summary.get('llama_cpp_cpu_backend')}")
    print(f"{'threads':>7}  {'measurement':<14}  {'llama.cpp time / pdserve time':>30}")
    for threads, k, med, lo, hi in rows:
        print(f"{threads:>7}  {k:<14}  {med:>10.2f}x  [{lo:.2f}, {hi:.2f}]")


if __name__ == "__main__":
    main()
