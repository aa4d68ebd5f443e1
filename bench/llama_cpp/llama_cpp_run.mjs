// llama.cpp, through node-llama-cpp's prebuilt binaries, on a GGUF converted from a pdserve
// model (convert_to_gguf.py): greedy tokens for given prompt ids (to check they equal
// pdserve's), and the timings pdserve-bench engine measures: prefill of a long prompt, decode
// steps at batch 1 and at batch 8 (8 sequences decoding together), each a median of repeats.
//
// Usage: node llama_cpp_run.mjs NODE_MODULES GGUF MODE [key=value ...]
//   MODE greedy: prompt=1,2,3 tokens=32 threads=1  -> {"tokens": [...]}
//   MODE time:   threads=1 prefill=2048 context=128 steps=16 repeats=3
//                -> {"prefill_ms", "decode_b1_ms", "decode_b1_eval_ms", "decode_b8_ms",
//                    "llama_cpp", "cpu_backend"}
// decode_b1_eval_ms is llama.cpp's own eval time per single-token step (llama_perf_context),
// without node-llama-cpp's per-token work in JavaScript; the other times are wall times of
// the calls (at batch 8 and in prefill that per-call work is spread over many tokens).
// Prints one JSON object on stdout.
import path from 'path';
import { pathToFileURL } from 'url';

const [nodeModules, ggufPath, mode, ...rest] = process.argv.slice(2);
const opts = Object.fromEntries(rest.map((kv) => kv.split('=')));
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(nodeModules, 'node-llama-cpp', 'dist', 'index.js')).href);

const threads = Number(opts.threads ?? 1);
// Log lines are kept (not printed): they carry llama.cpp's timings and the CPU backend
// variant ggml picked for this machine (load_backend: ... libggml-cpu-<arch>.so).
const logLines = [];
const llama = await getLlama({
  gpu: false, build: 'never', logLevel: LlamaLogLevel.debug,
  logger: (level, message) => logLines.push(String(message)),
});
const model = await llama.loadModel({ modelPath: ggufPath });
const vocab = model.tokens.count ?? 4096;

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// Tokens that are not control tokens, reproducibly.
function randomTokens(n, seed) {
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; ++i) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(16 + (x % (Math.min(vocab, 4096) - 32)));
  }
  return out;
}

async function greedy(sequence, prompt, count) {
  const out = [];
  for await (const t of sequence.evaluate(prompt, { temperature: 0 })) {
    out.push(t);
    if (out.length >= count) break;
  }
  return out;
}

if (mode === 'greedy') {
  const prompt = opts.prompt.split(',').map(Number);
  const count = Number(opts.tokens ?? 32);
  const context = await model.createContext({ contextSize: prompt.length + count + 8, threads, sequences: 1 });
  const tokens = await greedy(context.getSequence(), prompt, count);
  console.log(JSON.stringify({ tokens }));
  await context.dispose();
} else if (mode === 'time') {
  const prefillTokens = Number(opts.prefill ?? 2048);
  const contextTokens = Number(opts.context ?? 128);
  const steps = Number(opts.steps ?? 16);
  const repeats = Number(opts.repeats ?? 3);
  // Prefill: the time to evaluate the prompt and produce its first token.
  const prefill = [];
  for (let r = 0; r < repeats; ++r) {
    const context = await model.createContext({
      contextSize: prefillTokens + 8, batchSize: prefillTokens, threads, sequences: 1 });
    const start = performance.now();
    await greedy(context.getSequence(), randomTokens(prefillTokens, 100 + r), 1);
    prefill.push(performance.now() - start);
    await context.dispose();
  }
  // Decode: B sequences with `contextTokens` each, then `steps` tokens each, decoded together.
  // llama_perf_context_print's "eval time = X ms / N runs": single-token decode calls only.
  async function evalMsPerRun(context) {
    const from = logLines.length;
    await context.printTimings();
    const line = logLines.slice(from).find((l) => / eval time =/.test(l) && !/prompt/.test(l));
    const m = line && line.match(/eval time =\s*([0-9.]+) ms \/\s*([0-9]+) runs/);
    return m && Number(m[2]) > 0 ? Number(m[1]) / Number(m[2]) : null;
  }
  async function decode(batch) {
    const samples = [];
    const evalSamples = [];
    for (let r = 0; r < repeats; ++r) {
      const context = await model.createContext({
        contextSize: batch * (contextTokens + steps + 8), batchSize: 512, threads, sequences: batch,
        performanceTracking: true });
      const sequences = Array.from({ length: batch }, () => context.getSequence());
      // Warm: the contexts' prefill, one token each.
      await Promise.all(sequences.map((s, i) => greedy(s, randomTokens(contextTokens, 200 + i), 1)));
      await evalMsPerRun(context);  // Resets the counters.
      const start = performance.now();
      await Promise.all(sequences.map((s) => greedy(s, [17], steps)));
      samples.push((performance.now() - start) / steps);
      const evalMs = await evalMsPerRun(context);
      if (evalMs !== null) evalSamples.push(evalMs);
      await context.dispose();
    }
    return { wall: median(samples), eval: evalSamples.length ? median(evalSamples) : null };
  }
  const b1 = await decode(1);
  const b8 = await decode(8);
  const backend = logLines.map((l) => l.match(/libggml-cpu-[a-z0-9_]+\.so/)).find((m) => m);
  const result = {
    prefill_ms: median(prefill),
    decode_b1_ms: b1.wall,
    decode_b1_eval_ms: b1.eval,
    decode_b8_ms: b8.wall,
    threads,
    llama_cpp: llama.llamaCppRelease,
    cpu_backend: backend ? backend[0] : null,
    cpu_features: llama.systemInfo,
  };
  console.log(JSON.stringify(result));
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
await model.dispose();
