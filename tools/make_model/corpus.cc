#include "tools/make_model/corpus.h"

#include <cmath>
#include <vector>

namespace pdserve::tools {
namespace {

const char* const kWords[] = {
    "the",     "of",      "and",      "to",      "a",      "in",        "is",     "it",
    "you",     "that",    "he",       "was",     "for",    "on",        "are",    "with",
    "as",      "I",       "his",      "they",    "be",     "at",        "one",    "have",
    "this",    "from",    "or",       "had",     "by",     "not",       "word",   "but",
    "what",    "some",    "we",       "can",     "out",    "other",     "were",   "all",
    "there",   "when",    "up",       "use",     "your",   "how",       "said",   "an",
    "each",    "she",     "which",    "do",      "their",  "time",      "if",     "will",
    "way",     "about",   "many",     "then",    "them",   "write",     "would",  "like",
    "so",      "these",   "her",      "long",    "make",   "thing",     "see",    "him",
    "two",     "has",     "look",     "more",    "day",    "could",     "go",     "come",
    "did",     "number",  "sound",    "no",      "most",   "people",    "my",     "over",
    "know",    "water",   "than",     "call",    "first",  "who",       "may",    "down",
    "side",    "been",    "now",      "find",    "any",    "new",       "work",   "part",
    "take",    "get",     "place",    "made",    "live",   "where",     "after",  "back",
    "little",  "only",    "round",    "man",     "year",   "came",      "show",   "every",
    "good",    "me",      "give",     "our",     "under",  "name",      "very",   "through",
    "just",    "form",    "sentence", "great",   "think",  "say",       "help",   "low",
    "line",    "differ",  "turn",     "cause",   "much",   "mean",      "before", "move",
    "right",   "boy",     "old",      "too",     "same",   "tell",      "does",   "set",
    "three",   "want",    "air",      "well",    "also",   "play",      "small",  "end",
    "put",     "home",    "read",     "hand",    "port",   "large",     "spell",  "add",
    "even",    "land",    "here",     "must",    "big",    "high",      "such",   "follow",
    "act",     "why",     "ask",      "men",     "change", "went",      "light",  "kind",
    "off",     "need",    "house",    "picture", "try",    "us",        "again",  "animal",
    "point",   "mother",  "world",    "near",    "build",  "self",      "earth",  "father",
    "head",    "stand",   "own",      "page",    "should", "country",   "found",  "answer",
    "school",  "grow",    "study",    "still",   "learn",  "plant",     "cover",  "food",
    "sun",     "four",    "between",  "state",   "keep",   "eye",       "never",  "last",
    "let",     "thought", "city",     "tree",    "cross",  "farm",      "hard",   "start",
    "might",   "story",   "saw",      "far",     "sea",    "draw",      "left",   "late",
    "run",     "while",   "press",    "close",   "night",  "real",      "life",   "few",
    "north",   "server",  "request",  "token",   "model",  "cache",     "decode", "prefill",
    "latency", "batch",   "memory",   "block",   "layer",  "attention", "llama",  "transfer",
    "worker",  "router",  "cluster",  "stream",  "queue",  "schedule",
};

const char* const kCode[] = {
    "for (int i = 0; i < n; ++i) {\n  sum += x[i];\n}\n",
    "def forward(self, x):\n    return self.proj(x) + x\n",
    "if (status.ok()) return value;\n",
    "std::vector<int32_t> ids = tokenizer.Encode(text);\n",
    "SELECT id, name FROM users WHERE age > 30;\n",
    "{\"model\": \"tiny\", \"max_tokens\": 16, \"temperature\": 0.7}\n",
    "x = [1, 2, 3]\r\ny = {a: 1}\r\n",
};

const char* const kUnicode[] = {
    "café", "naïve", "über", "señor", "façade", "中文", "日本語", "한국어", "Привет", "γειά",
    "😀",    "🦙",  "→",    "©",     "€",      "—",    "…",      "ﬁ",      "\u00a0", "\u3000",
};

const char* const kPunctuation[] = {".", ",", "!", "?", ":", ";", "'s", "'t", "\"", "(", ")", " -"};

const char* const kSyllables[] = {
    "ka",  "ri",  "to",  "mo",   "ne",  "sa", "lu",  "vi", "de", "po", "an", "el", "or", "ith",
    "ung", "ter", "ble", "tion", "ing", "qu", "str", "ph", "ch", "sh", "zz", "oo", "ea", "y"};

}  // namespace

uint64_t SeededRandom::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double SeededRandom::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = Uniform();
  const double u2 = Uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2 * M_PI * u2);
  has_spare_ = true;
  return r * std::cos(2 * M_PI * u2);
}

std::string GenerateCorpus(uint64_t seed, size_t approx_bytes) {
  SeededRandom rng(seed);
  // A lexicon of real words plus pseudo-words, drawn with Zipf-like frequencies.
  std::vector<std::string> lexicon(std::begin(kWords), std::end(kWords));
  for (int i = 0; i < 6000; ++i) {
    std::string w;
    const int parts = 1 + static_cast<int>(rng.Below(4));
    for (int p = 0; p < parts; ++p) w += kSyllables[rng.Below(std::size(kSyllables))];
    lexicon.push_back(w);
  }
  std::vector<double> cumulative(lexicon.size());
  double total = 0;
  for (size_t i = 0; i < lexicon.size(); ++i) {
    total += 1.0 / std::pow(static_cast<double>(i + 1), 0.9);
    cumulative[i] = total;
  }
  auto pick_word = [&]() -> const std::string& {
    const double u = rng.Uniform() * total;
    size_t lo = 0, hi = cumulative.size() - 1;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (cumulative[mid] < u)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lexicon[lo];
  };

  std::string out;
  out.reserve(approx_bytes + 256);
  while (out.size() < approx_bytes) {
    const uint64_t kind = rng.Below(100);
    if (kind < 80) {
      const int words = 4 + static_cast<int>(rng.Below(12));
      for (int i = 0; i < words; ++i) {
        std::string w = pick_word();
        if (i == 0 && !w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 32);
        out += (i == 0 ? "" : " ") + w;
        if (rng.Below(10) == 0) out += kPunctuation[rng.Below(std::size(kPunctuation))];
      }
      out += rng.Below(3) == 0 ? ".\n" : ". ";
    } else if (kind < 87) {
      out += kCode[rng.Below(std::size(kCode))];
    } else if (kind < 93) {
      out += std::to_string(rng.Below(100000)) + (rng.Below(2) ? " " : ", ");
    } else if (kind < 98) {
      out += kUnicode[rng.Below(std::size(kUnicode))];
      out += " ";
    } else {
      out += std::string(1 + rng.Below(6), rng.Below(2) ? ' ' : '\t');
    }
  }
  return out;
}

}  // namespace pdserve::tools
