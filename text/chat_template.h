// A model's chat template: turns a conversation into the prompt text the model was trained on,
// as transformers' apply_chat_template does. Loaded from the model directory:
// chat_template.jinja if present, else tokenizer_config.json's "chat_template" (a string, or a
// list of {name, template} whose "default" is used). The template sees `messages` (each with
// role and content), `add_generation_prompt`, `tools` and `documents` (none), the special
// tokens tokenizer_config.json names (bos_token, eos_token, pad_token, unk_token) and any
// extra keyword arguments (e.g. Qwen3's enable_thinking). The rendered text is tokenized
// without adding special tokens: the template places them.
// Thread-safety: immutable after loading; Render may be called concurrently.
#ifndef PDSERVE_TEXT_CHAT_TEMPLATE_H_
#define PDSERVE_TEXT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "text/jinja/template.h"

namespace pdserve::text {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // NOT_FOUND when the directory has no chat template; INVALID_ARGUMENT when it has one that
  // does not parse (naming the file and the line).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromModelDir(const std::string& dir);
  // From the text of tokenizer_config.json (and chat_template.jinja's text, when not empty).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromConfig(
      absl::string_view config_json, absl::string_view jinja_text = "");

  // The prompt text for `messages`. `extra` (a JSON object, possibly empty) adds variables.
  // INVALID_ARGUMENT when the template fails or refuses the conversation (its
  // raise_exception message is kept, e.g. "Conversation roles must alternate").
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt,
                                     const nlohmann::ordered_json& extra = {},
                                     const jinja::RenderLimits& limits = {}) const;

  const std::string& source() const { return source_; }

  // Whether a message may have `role`: one of the OpenAI API's (system, developer, user,
  // assistant, tool, function), or one the template names as a string literal. Requests
  // with other roles are refused (proto/bridge), rather than letting a template that prints
  // roles verbatim put an arbitrary header into the prompt.
  bool KnowsRole(absl::string_view role) const;

 private:
  ChatTemplate() = default;

  std::string source_;
  std::unique_ptr<jinja::Template> template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_CHAT_TEMPLATE_H_
