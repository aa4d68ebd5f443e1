#include "text/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::text {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = static_cast<bool>(in);
  if (!in) return std::string();
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return text.str();
}

// A special token in tokenizer_config.json: a string, or an AddedToken object with "content".
const std::string* TokenText(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return nullptr;
  if (it->is_string()) return it->get_ptr<const std::string*>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get_ptr<const std::string*>();
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromModelDir(const std::string& dir) {
  bool config_exists = false, jinja_exists = false;
  ASSIGN_OR_RETURN(std::string config, ReadFile(dir + "/tokenizer_config.json", &config_exists));
  ASSIGN_OR_RETURN(std::string jinja_text, ReadFile(dir + "/chat_template.jinja", &jinja_exists));
  if (!config_exists && !jinja_exists)
    return absl::NotFoundError(absl::StrCat(dir, " has no tokenizer_config.json"));
  auto loaded = FromConfig(config_exists ? config : "{}", jinja_text);
  if (!loaded.ok() && !absl::IsNotFound(loaded.status())) {
    return Annotate(loaded.status(),
                    jinja_exists ? dir + "/chat_template.jinja" : dir + "/tokenizer_config.json");
  }
  return loaded;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromConfig(
    absl::string_view config_json, absl::string_view jinja_text) {
  const nlohmann::json config =
      nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object())
    return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
  auto t = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  if (!jinja_text.empty()) {
    t->source_ = std::string(jinja_text);
  } else {
    auto field = config.find("chat_template");
    if (field == config.end() || field->is_null())
      return absl::NotFoundError("the model has no chat template");
    if (field->is_string()) {
      t->source_ = field->get<std::string>();
    } else if (field->is_array()) {
      // Named templates (transformers): the "default" one serves plain chat.
      for (const auto& named : *field) {
        if (named.is_object() && named.contains("name") && named["name"].is_string() &&
            named["name"].get<std::string>() == "default" && named.contains("template") &&
            named["template"].is_string()) {
          t->source_ = named["template"].get<std::string>();
        }
      }
      if (t->source_.empty())
        return absl::InvalidArgumentError("chat_template: a list without a \"default\" template");
    } else {
      return absl::InvalidArgumentError("chat_template: must be a string or a list of templates");
    }
  }
  auto parsed = jinja::Template::Parse(t->source_);
  if (!parsed.ok()) return Annotate(parsed.status(), "chat_template");
  t->template_ = *std::move(parsed);
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    if (const std::string* text = TokenText(config, key))
      t->special_tokens_.emplace_back(key, *text);
  }
  return t;
}

bool ChatTemplate::KnowsRole(absl::string_view role) const {
  static constexpr absl::string_view kOpenAiRoles[] = {"system",    "developer", "user",
                                                       "assistant", "tool",      "function"};
  for (absl::string_view known : kOpenAiRoles) {
    if (role == known) return true;
  }
  // A role the template compares with or prints as a literal (Llama 3.1's 'ipython').
  if (role.empty() || role.size() > 64) return false;
  return absl::StrContains(source_, absl::StrCat("'", role, "'")) ||
         absl::StrContains(source_, absl::StrCat("\"", role, "\""));
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 const nlohmann::ordered_json& extra,
                                                 const jinja::RenderLimits& limits) const {
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    auto message = std::make_shared<jinja::Dict>();
    message->entries = {{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}};
    list.emplace_back(std::move(message));
  }
  std::vector<std::pair<std::string, jinja::Value>> variables;
  variables.emplace_back("messages", jinja::Value(std::move(list)));
  variables.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
  variables.emplace_back("tools", jinja::Value::None());
  variables.emplace_back("documents", jinja::Value::None());
  for (const auto& [key, text] : special_tokens_) variables.emplace_back(key, jinja::Value(text));
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      variables.emplace_back(key, jinja::Value::FromJson(value));
    }
  }
  auto text = template_->Render(variables, limits);
  if (!text.ok()) return Annotate(text.status(), "chat template");
  return text;
}

}  // namespace pdserve::text
