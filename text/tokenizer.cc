#include "text/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "re2/re2.h"
#include "text/byte_level.h"

namespace pdserve::text {
namespace {

using nlohmann::json;

absl::Status Unsupported(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", what));
}

std::string TypeOf(const json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct PreTokenizerSpec {
  std::string pattern;  // Empty: no regex split.
  bool add_prefix_space = false;
  bool byte_level = false;
};

absl::Status ParsePreTokenizer(const json& node, PreTokenizerSpec* spec) {
  if (node.is_null()) return absl::OkStatus();
  if (!node.is_object()) return Unsupported("pre_tokenizer must be an object or null");
  const std::string type = TypeOf(node);
  if (type == "Sequence") {
    auto list = node.find("pretokenizers");
    if (list == node.end() || !list->is_array())
      return Unsupported("Sequence without 'pretokenizers'");
    for (const json& child : *list) RETURN_IF_ERROR(ParsePreTokenizer(child, spec));
    return absl::OkStatus();
  }
  if (type == "Split") {
    auto pattern = node.find("pattern");
    if (pattern == node.end() || !pattern->is_object())
      return Unsupported("Split without 'pattern'");
    auto regex = pattern->find("Regex");
    auto literal = pattern->find("String");
    std::string behavior = node.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") {
      return Unsupported(absl::StrCat("Split behavior '", behavior, "' (only Isolated)"));
    }
    if (node.value("invert", false)) return Unsupported("Split with invert = true");
    if (!spec->pattern.empty()) return Unsupported("more than one Split pre-tokenizer");
    if (regex != pattern->end() && regex->is_string()) {
      spec->pattern = regex->get<std::string>();
    } else if (literal != pattern->end() && literal->is_string()) {
      spec->pattern = RE2::QuoteMeta(literal->get<std::string>());
    } else {
      return Unsupported("Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    spec->byte_level = true;
    spec->add_prefix_space = node.value("add_prefix_space", false);
    if (node.value("use_regex", true)) {
      if (!spec->pattern.empty()) return Unsupported("ByteLevel use_regex after a Split");
      spec->pattern = std::string(RegexPreTokenizer::kGpt2Pattern);
    }
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat("pre_tokenizer type '", type,
                                  "' is not supported (supported: Sequence, Split, ByteLevel)"));
}

// Collects the special-token ids TemplateProcessing puts before $A.
absl::Status ParsePostProcessor(const json& node,
                                const absl::flat_hash_map<std::string, int32_t>& ids,
                                std::vector<int32_t>* prefix) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(node);
  if (type == "Sequence") {
    auto list = node.find("processors");
    if (list == node.end() || !list->is_array())
      return Unsupported("post_processor Sequence without 'processors'");
    for (const json& child : *list) RETURN_IF_ERROR(ParsePostProcessor(child, ids, prefix));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();  // Offsets only.
  if (type == "TemplateProcessing") {
    auto single = node.find("single");
    if (single == node.end() || !single->is_array())
      return Unsupported("TemplateProcessing without 'single'");
    for (const json& piece : *single) {
      if (piece.contains("Sequence")) break;
      auto special = piece.find("SpecialToken");
      if (special == piece.end() || !special->is_object()) continue;
      const std::string name = special->value("id", std::string());
      auto it = ids.find(name);
      if (it == ids.end()) {
        return Unsupported(absl::StrCat("TemplateProcessing names unknown token '", name, "'"));
      }
      prefix->push_back(it->second);
    }
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat("post_processor type '", type, "' is not supported"));
}

absl::Status CheckDecoder(const json& node) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(node);
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto list = node.find("decoders");
    if (list == node.end() || !list->is_array())
      return Unsupported("decoder Sequence without 'decoders'");
    for (const json& child : *list) RETURN_IF_ERROR(CheckDecoder(child));
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat("decoder type '", type, "' is not supported (ByteLevel only)"));
}

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto tokenizer = FromJson(text);
  if (!tokenizer.ok()) return Annotate(tokenizer.status(), path);
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Unsupported("not a JSON object");
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  try {
    // Model.
    auto model = root.find("model");
    if (model == root.end() || !model->is_object()) return Unsupported("missing 'model'");
    const std::string model_type = TypeOf(*model);
    if (model_type != "BPE" && !(model_type.empty() && model->contains("merges"))) {
      return Unsupported(absl::StrCat("model type '", model_type, "' is not supported (BPE only)"));
    }
    if (model->value("byte_fallback", false)) {
      return Unsupported("BPE byte_fallback (SentencePiece-style tokenizers) is not supported");
    }
    for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      auto it = model->find(field);
      if (it != model->end() && !it->is_null() &&
          !(it->is_string() && it->get<std::string>().empty())) {
        return Unsupported(absl::StrCat("BPE ", field, " is not supported"));
      }
    }
    auto vocab_node = model->find("vocab");
    if (vocab_node == model->end() || !vocab_node->is_object())
      return Unsupported("model.vocab must be an object");
    absl::flat_hash_map<std::string, int32_t> vocab;
    int32_t max_id = -1;
    for (auto it = vocab_node->begin(); it != vocab_node->end(); ++it) {
      if (!it.value().is_number_integer())
        return Unsupported(absl::StrCat("vocab entry '", it.key(), "' is not an integer id"));
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= (1 << 24))
        return Unsupported(absl::StrCat("vocab id ", id, " is outside [0, 2^24)"));
      vocab[it.key()] = static_cast<int32_t>(id);
      max_id = std::max(max_id, static_cast<int32_t>(id));
    }
    tok->id_to_token_.assign(max_id + 1, std::string());
    tok->id_to_bytes_.assign(max_id + 1, std::string());
    for (const auto& [token, id] : vocab) {
      tok->id_to_token_[id] = token;
      ByteLevelAlphabet::Get().DecodeToBytes(token, &tok->id_to_bytes_[id]);
    }

    std::vector<std::pair<std::string, std::string>> merges;
    auto merges_node = model->find("merges");
    if (merges_node != model->end() && !merges_node->is_null()) {
      if (!merges_node->is_array()) return Unsupported("model.merges must be a list");
      merges.reserve(merges_node->size());
      for (const json& m : *merges_node) {
        if (m.is_string()) {
          const std::string s = m.get<std::string>();
          const size_t space = s.find(' ', 1);
          if (space == std::string::npos)
            return Unsupported(absl::StrCat("merge '", s, "' is not 'a b'"));
          merges.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
          merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
          return Unsupported("each merge must be \"a b\" or [\"a\", \"b\"]");
        }
      }
    }
    ASSIGN_OR_RETURN(tok->bpe_, BpeModel::Create(std::move(vocab), merges,
                                                 model->value("ignore_merges", false)));

    // Added tokens.
    absl::flat_hash_map<std::string, int32_t> names_to_ids;
    auto added = root.find("added_tokens");
    if (added != root.end() && added->is_array()) {
      for (const json& a : *added) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
            !a.contains("content") || !a["content"].is_string()) {
          return Unsupported("added_tokens entries need an integer 'id' and a string 'content'");
        }
        AddedToken t{a["id"].get<int32_t>(), a["content"].get<std::string>(),
                     a.value("special", false), a.value("lstrip", false), a.value("rstrip", false)};
        if (t.id < 0 || t.id >= (1 << 24) || t.content.empty()) {
          return Unsupported(
              absl::StrCat("added token '", t.content, "' has a bad id or is empty"));
        }
        max_id = std::max(max_id, t.id);
        tok->added_by_content_[t.content] = t.id;
        names_to_ids[t.content] = t.id;
        tok->added_by_id_[t.id] = std::move(t);
      }
    }
    tok->vocab_size_ = max_id + 1;
    if (!tok->added_by_content_.empty()) {
      std::vector<std::string> contents;
      for (const auto& [content, id] : tok->added_by_content_) contents.push_back(content);
      // Longest first, so that leftmost-first alternation picks the longest match.
      std::sort(contents.begin(), contents.end(), [](const std::string& a, const std::string& b) {
        return a.size() != b.size() ? a.size() > b.size() : a < b;
      });
      std::string pattern;
      for (const std::string& c : contents) {
        if (!pattern.empty()) pattern.push_back('|');
        pattern += RE2::QuoteMeta(c);
      }
      RE2::Options options;
      options.set_log_errors(false);
      options.set_max_mem(256 << 20);
      tok->added_matcher_ = std::make_unique<RE2>(pattern, options);
      if (!tok->added_matcher_->ok()) return Unsupported("cannot compile the added-token matcher");
    }
    for (const auto& [token, id] : tok->bpe_->vocab()) names_to_ids.try_emplace(token, id);

    // Normalizer: none, or NFC (Qwen's), applied with utf8proc to the text between added
    // tokens, as Hugging Face does for tokens that are not normalized themselves.
    auto normalizer = root.find("normalizer");
    if (normalizer != root.end() && !normalizer->is_null()) {
      if (TypeOf(*normalizer) != "NFC") {
        return Unsupported(
            absl::StrCat("normalizer type '", TypeOf(*normalizer), "' is not supported"));
      }
      tok->normalize_nfc_ = true;
    }
    PreTokenizerSpec spec;
    auto pre = root.find("pre_tokenizer");
    if (pre != root.end()) RETURN_IF_ERROR(ParsePreTokenizer(*pre, &spec));
    if (!spec.byte_level) {
      return Unsupported("only byte-level BPE is supported (no ByteLevel pre-tokenizer found)");
    }
    tok->add_prefix_space_ = spec.add_prefix_space;
    if (!spec.pattern.empty()) {
      ASSIGN_OR_RETURN(tok->pre_tokenizer_, RegexPreTokenizer::Create(spec.pattern));
    }
    auto post = root.find("post_processor");
    if (post != root.end())
      RETURN_IF_ERROR(ParsePostProcessor(*post, names_to_ids, &tok->prefix_ids_));
    auto decoder = root.find("decoder");
    if (decoder != root.end()) RETURN_IF_ERROR(CheckDecoder(*decoder));
  } catch (const nlohmann::json::exception& e) {
    return Unsupported(absl::StrCat("malformed: ", e.what()));
  }
  return tok;
}

absl::Status Tokenizer::EncodeOrdinary(absl::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<absl::string_view> pieces;
  std::string normalized;
  if (normalize_nfc_ && NormalizeNfc(text, &normalized)) text = normalized;
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  if (pre_tokenizer_ != nullptr) {
    pre_tokenizer_->Split(text, &pieces);
  } else {
    pieces.push_back(text);
  }
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  std::string mapped;
  for (absl::string_view piece : pieces) {
    mapped.clear();
    alphabet.EncodeBytes(piece, &mapped);
    RETURN_IF_ERROR(bpe_->Encode(mapped, ids));
  }
  return absl::OkStatus();
}

bool NormalizeNfc(absl::string_view text, std::string* out) {
  // ASCII is its own NFC: most text never reaches utf8proc.
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return false;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return false;  // Not valid UTF-8: left as it is (its bytes still encode).
  out->assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return true;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  size_t pos = 0;
  const re2::StringPiece input(text.data(), text.size());
  re2::StringPiece match;
  while (added_matcher_ != nullptr && pos < text.size() &&
         added_matcher_->Match(input, pos, text.size(), RE2::UNANCHORED, &match, 1)) {
    const size_t start = static_cast<size_t>(match.data() - text.data());
    size_t end = start + match.size();
    const AddedToken& token = added_by_id_.at(added_by_content_.at(std::string(match)));
    size_t before_end = start;
    if (token.lstrip) {
      while (before_end > pos &&
             absl::ascii_isspace(static_cast<unsigned char>(text[before_end - 1])))
        --before_end;
    }
    RETURN_IF_ERROR(EncodeOrdinary(text.substr(pos, before_end - pos), &ids));
    ids.push_back(token.id);
    if (token.rstrip) {
      while (end < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[end]))) ++end;
    }
    pos = end;
  }
  RETURN_IF_ERROR(EncodeOrdinary(text.substr(pos), &ids));
  return ids;
}

bool Tokenizer::AppendTokenBytes(int32_t id, bool skip_special_tokens, std::string* out) const {
  auto added = added_by_id_.find(id);
  if (added != added_by_id_.end()) {
    if (!(skip_special_tokens && added->second.special)) out->append(added->second.content);
    return true;
  }
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || id_to_token_[id].empty()) {
    return false;
  }
  out->append(id_to_bytes_[id]);
  return true;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  std::string out;
  for (int32_t id : ids) {
    if (!AppendTokenBytes(id, skip_special_tokens, &out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in the vocabulary (size ", vocab_size_, ")"));
    }
  }
  return out;
}

std::optional<int32_t> Tokenizer::TokenToId(absl::string_view token) const {
  auto added = added_by_content_.find(token);
  if (added != added_by_content_.end()) return added->second;
  auto it = bpe_->vocab().find(token);
  if (it != bpe_->vocab().end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second.special;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Push(int32_t id) {
  if (!tokenizer_->AppendTokenBytes(id, skip_special_, &pending_)) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary"));
  }
  return TakeComplete();
}

std::string IncrementalDetokenizer::TakeComplete() {
  std::string out;
  size_t pos = 0;
  const auto* s = reinterpret_cast<const uint8_t*>(pending_.data());
  while (pos < pending_.size()) {
    const uint8_t c = s[pos];
    const int len = c < 0x80             ? 1
                    : (c & 0xE0) == 0xC0 ? 2
                    : (c & 0xF0) == 0xE0 ? 3
                    : (c & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0) {  // Cannot start a sequence.
      out.append("\xEF\xBF\xBD");
      ++pos;
      continue;
    }
    if (pos + len > pending_.size()) {
      // Incomplete: keep it if what is there could still become valid.
      bool plausible = true;
      for (size_t k = pos + 1; k < pending_.size(); ++k) plausible &= (s[k] & 0xC0) == 0x80;
      if (plausible) break;
    }
    size_t next = pos;
    const int32_t cp = NextCodePoint(pending_, &next);
    if (cp < 0) {
      out.append("\xEF\xBF\xBD");
      pos = next;
    } else {
      out.append(pending_, pos, next - pos);
      pos = next;
    }
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out = TakeComplete();
  if (!pending_.empty()) {
    out.append("\xEF\xBF\xBD");
    pending_.clear();
  }
  return out;
}

}  // namespace pdserve::text
