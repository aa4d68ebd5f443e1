#include "tools/make_model/bpe_trainer.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/status_macros.h"
#include "text/byte_level.h"
#include "text/pretokenizer.h"

namespace pdserve::tools {
namespace {

uint64_t Key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

}  // namespace

absl::StatusOr<TrainedBpe> TrainBpe(const std::string& corpus, const std::string& pattern,
                                    int vocab_size) {
  if (vocab_size < 256) return absl::InvalidArgumentError("vocab_size must be >= 256");
  ASSIGN_OR_RETURN(auto pre, text::RegexPreTokenizer::Create(pattern));
  const text::ByteLevelAlphabet& alphabet = text::ByteLevelAlphabet::Get();

  TrainedBpe out;
  absl::flat_hash_map<std::string, int> ids;
  for (int b = 0; b < 256; ++b) {
    out.tokens.push_back(alphabet.Encode(static_cast<uint8_t>(b)));
    ids[out.tokens.back()] = b;
  }
  // Unique words with counts, as symbol sequences.
  absl::flat_hash_map<std::string, int64_t> word_counts;
  std::vector<absl::string_view> pieces;
  pre->Split(corpus, &pieces);
  for (absl::string_view p : pieces) ++word_counts[std::string(p)];
  struct Word {
    std::vector<int> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (const auto& [text, count] : word_counts) {
    Word w{{}, count};
    for (char c : text) w.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }
  // Deterministic order regardless of hash iteration.
  std::sort(words.begin(), words.end(),
            [](const Word& a, const Word& b) { return a.symbols < b.symbols; });

  absl::flat_hash_map<uint64_t, int64_t> pair_counts;
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<int>> where;
  auto account = [&](int w, int64_t sign) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = Key(s[i], s[i + 1]);
      pair_counts[k] += sign * words[w].count;
      if (sign > 0) where[k].insert(w);
    }
  };
  for (int w = 0; w < static_cast<int>(words.size()); ++w) account(w, +1);

  while (static_cast<int>(out.tokens.size()) < vocab_size) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [k, c] : pair_counts) {
      if (c > best_count || (c == best_count && c > 0 && k < best)) {
        best = k;
        best_count = c;
      }
    }
    if (best_count < 2) break;
    const int a = static_cast<int>(best >> 32);
    const int b = static_cast<int>(best & 0xffffffffu);
    const std::string merged = out.tokens[a] + out.tokens[b];
    int merged_id;
    auto existing = ids.find(merged);
    if (existing != ids.end()) {
      merged_id = existing->second;
    } else {
      merged_id = static_cast<int>(out.tokens.size());
      out.tokens.push_back(merged);
      ids[merged] = merged_id;
    }
    out.merges.emplace_back(out.tokens[a], out.tokens[b]);
    std::vector<int> affected(where[best].begin(), where[best].end());
    std::sort(affected.begin(), affected.end());
    for (int w : affected) {
      auto& s = words[w].symbols;
      account(w, -1);
      std::vector<int> next;
      next.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          next.push_back(merged_id);
          ++i;
        } else {
          next.push_back(s[i]);
        }
      }
      s = std::move(next);
      account(w, +1);
    }
    pair_counts.erase(best);
    where.erase(best);
  }
  return out;
}

}  // namespace pdserve::tools
