// pdserve-generate: streams a completion from one model in this process (no cluster).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/kv_layout.h"
#include "engine/engine_flags.h"
#include "engine/generator.h"
#include "engine/model_loader.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, prompt, "", "Prompt text.");
ABSL_FLAG(std::string, prompt_ids, "",
          "Prompt as comma-separated token ids (instead of --prompt).");
ABSL_FLAG(int, max_tokens, 32, "Tokens to generate.");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling mass in (0, 1].");
ABSL_FLAG(int, top_k, 0, "Top-k sampling; 0 disables.");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed.");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings (comma-separated).");
ABSL_FLAG(bool, ignore_eos, false, "Do not stop at end-of-sequence tokens.");
ABSL_FLAG(int, prefill_chunk, 512, "Prompt tokens per prefill step.");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache dtype: f32, f16 or bf16.");
ABSL_FLAG(bool, print_ids, false, "Print the generated token ids on stdout after the text.");

int main(int argc, char** argv) {
  pdserve::ParseCommandLine(
      argc, argv,
      "pdserve-generate: stream a completion for a prompt from a model directory.\n"
      "Usage: pdserve-generate --model=DIR --prompt=TEXT [--max_tokens=N] [--temperature=T]\n"
      "       pdserve-generate --model=DIR --backend=emulated --profile=FILE ... (a profile's "
      "timing, no weights)");
  namespace engine = pdserve::engine;
  namespace text = pdserve::text;
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    std::fprintf(stderr,
                 "--model: required (a model directory; make one with pdserve-make-model)\n");
    return 2;
  }
  engine::GenerateOptions generate;
  generate.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (!pdserve::ParseDType(absl::GetFlag(FLAGS_kv_dtype), &generate.kv_dtype)) {
    std::fprintf(stderr, "--kv_dtype: '%s' is not one of f32, f16, bf16\n",
                 absl::GetFlag(FLAGS_kv_dtype).c_str());
    return 2;
  }
  // One process prefills and decodes: the emulated backend times both by the step formula.
  auto options = engine::EngineOptionsFromFlags("decode", generate.kv_dtype);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto loaded = engine::LoadModel(dir, *options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  std::vector<int32_t> prompt;
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',')) {
      int id;
      if (!absl::SimpleAtoi(part, &id)) {
        std::fprintf(stderr, "--prompt_ids: '%s' is not an integer\n", std::string(part).c_str());
        return 2;
      }
      prompt.push_back(id);
    }
  } else {
    if (loaded->tokenizer == nullptr) {
      std::fprintf(stderr, "--prompt: the model has no tokenizer.json; use --prompt_ids\n");
      return 2;
    }
    auto ids = loaded->tokenizer->Encode(absl::GetFlag(FLAGS_prompt));
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ids.status().message()).c_str());
      return 1;
    }
    prompt = *std::move(ids);
  }
  text::SamplingConfig sampling;
  sampling.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sampling.top_k = absl::GetFlag(FLAGS_top_k);
  sampling.seed = absl::GetFlag(FLAGS_seed);
  sampling.stop = absl::GetFlag(FLAGS_stop);
  sampling.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  auto result =
      engine::GenerateSingle(*loaded->model, loaded->tokenizer.get(), prompt, sampling,
                             loaded->eos_token_ids, generate, [](const std::string& text) {
                               std::fwrite(text.data(), 1, text.size(), stdout);
                               std::fflush(stdout);
                             });
  if (!result.ok()) {
    std::fprintf(stderr, "\n%s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("\n");
  if (absl::GetFlag(FLAGS_print_ids))
    std::printf("ids: %s\n", absl::StrJoin(result->tokens, ",").c_str());
  const double seconds = absl::ToDoubleSeconds(result->total_time - result->time_to_first_token);
  std::fprintf(
      stderr,
      "[%zu prompt tokens, %zu generated, finish=%s, ttft=%.1f ms, decode %.1f tok/s, %s]\n",
      prompt.size(), result->tokens.size(), text::FinishReasonName(result->finish),
      absl::ToDoubleMilliseconds(result->time_to_first_token),
      result->tokens.size() > 1 && seconds > 0 ? (result->tokens.size() - 1) / seconds : 0.0,
      loaded->model->instruction_set().c_str());
  return 0;
}
