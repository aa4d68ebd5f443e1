// Chat prompts through the shared request validation: rendered with the model's template and
// tokenized without special tokens; every limit names its field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/test_models.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "wire/request_bridge.h"

namespace pdserve::wire {
namespace {

using ::testing::HasSubstr;

class ChatBridgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TestModelDir("tiny");
    auto tokenizer = text::Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    auto chat = text::ChatTemplate::FromModelDir(dir);
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = *std::move(chat);
    limits_.model_name = "tiny";
    limits_.vocab_size = tokenizer_->vocab_size();
    limits_.max_context_tokens = 4096;
    limits_.max_prompt_bytes = 4096;
  }

  v1::GenerateRequest Chat(std::vector<std::pair<std::string, std::string>> messages) {
    v1::GenerateRequest r;
    r.mutable_chat();  // A chat even without messages.
    for (auto& [role, content] : messages) {
      v1::ChatMessage* m = r.mutable_chat()->add_messages();
      m->set_role(role);
      m->set_content(content);
    }
    return r;
  }

  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<text::ChatTemplate> chat_;
  ModelLimits limits_;
};

TEST_F(ChatBridgeTest, AChatIsTheTemplatesTextTokenizedWithoutAddedSpecialTokens) {
  const v1::GenerateRequest r = Chat({{"system", "Be brief."}, {"user", "Hello there"}});
  auto validated = ValidateGenerateRequest(r, limits_, tokenizer_.get(), chat_.get());
  ASSERT_TRUE(validated.ok()) << validated.status();
  auto text = chat_->Render({{"system", "Be brief."}, {"user", "Hello there"}}, true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|begin_of_text|>system: Be brief.<|eot_id|>user: Hello there<|eot_id|>assistant:");
  auto expected = tokenizer_->Encode(*text, /*add_special_tokens=*/false);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(validated->prompt, *expected);
  // The template placed the one BOS; tokenizing did not add a second.
  const int32_t bos = tokenizer_->prefix_ids().at(0);
  EXPECT_EQ(validated->prompt[0], bos);
  EXPECT_NE(validated->prompt[1], bos);
}

TEST_F(ChatBridgeTest, TemplateArgumentsReachTheTemplate) {
  // A template that reads an extra variable, as Qwen3's reads enable_thinking.
  auto chat = text::ChatTemplate::FromConfig(
      R"({"chat_template": "{% if shout is defined and shout %}LOUD {% endif %}{{ messages[0].content }}"})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  v1::GenerateRequest r = Chat({{"user", "hi"}});
  r.mutable_chat()->set_template_kwargs_json(R"({"shout": true})");
  auto validated = ValidateGenerateRequest(r, limits_, tokenizer_.get(), chat->get());
  ASSERT_TRUE(validated.ok()) << validated.status();
  EXPECT_EQ(validated->prompt, *tokenizer_->Encode("LOUD hi", false));
}

TEST_F(ChatBridgeTest, BadChatsNameTheFieldAndTheLimit) {
  struct Bad {
    v1::GenerateRequest request;
    const char* message;
  };
  std::vector<Bad> cases;
  cases.push_back({Chat({}), "prompt.chat.messages: must not be empty"});
  cases.push_back({Chat({{"", "x"}}), "prompt.chat.messages[0].role: 0 bytes; must be 1 to 64"});
  cases.push_back({Chat({{"user", "ok"}, {std::string(65, 'r'), "x"}}),
                   "prompt.chat.messages[1].role: 65 bytes; must be 1 to 64"});
  cases.push_back({Chat({{"user", std::string(5000, 'x')}}),
                   "prompt.chat: 5004 bytes, at most 4096 (--max_prompt_bytes)"});
  v1::GenerateRequest many;
  for (int i = 0; i < kMaxChatMessages + 1; ++i) {
    v1::ChatMessage* m = many.mutable_chat()->add_messages();
    m->set_role("u");
  }
  cases.push_back({many, "prompt.chat.messages: 4097 messages, at most 4096"});
  // A role neither the OpenAI API nor the template knows would print a made-up header into
  // the prompt of templates that print roles verbatim.
  cases.push_back({Chat({{"user", "hi"}, {"wizard", "x"}}),
                   "prompt.chat.messages[1].role: 'wizard' is neither an OpenAI API role"});
  v1::GenerateRequest kwargs = Chat({{"user", "hi"}});
  kwargs.mutable_chat()->set_template_kwargs_json("[1, 2]");
  cases.push_back({kwargs, "prompt.chat.template_kwargs_json: must be a JSON object"});
  kwargs.mutable_chat()->set_template_kwargs_json(std::string(70000, ' '));
  cases.push_back({kwargs, "prompt.chat.template_kwargs_json: 70000 bytes, at most 65536"});
  for (const Bad& c : cases) {
    // Sizes are checked before any worker thread is spent (PrecheckGenerateRequest), and the
    // same checks hold in the full validation.
    auto validated = ValidateGenerateRequest(c.request, limits_, tokenizer_.get(), chat_.get());
    ASSERT_FALSE(validated.ok()) << c.message;
    EXPECT_EQ(validated.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(validated.status().message(), HasSubstr(c.message));
  }
  EXPECT_THAT(
      PrecheckGenerateRequest(Chat({{"user", std::string(5000, 'x')}}), limits_).status().message(),
      HasSubstr("prompt.chat: 5004 bytes"));
}

TEST(ChatTemplateRolesTest, OpenAiRolesAndThoseTheTemplateNamesAreKnown) {
  auto t = text::ChatTemplate::FromConfig(
      R"({"chat_template": "{% for m in messages %}{% if m.role == 'ipython' %}<tool>{% endif %}{{ m.role }}: {{ m.content }}{% endfor %}"})");
  ASSERT_TRUE(t.ok()) << t.status();
  for (const char* role :
       {"system", "developer", "user", "assistant", "tool", "function", "ipython"}) {
    EXPECT_TRUE((*t)->KnowsRole(role)) << role;
  }
  for (const char* role : {"wizard", "", "ipytho", "m.role"})
    EXPECT_FALSE((*t)->KnowsRole(role)) << role;
}

TEST_F(ChatBridgeTest, AModelWithoutATemplateOrARefusingTemplateSaysSo) {
  auto none = ValidateGenerateRequest(Chat({{"user", "hi"}}), limits_, tokenizer_.get(), nullptr);
  EXPECT_THAT(none.status().message(), HasSubstr("prompt.chat: this model has no chat template"));
  auto strict = text::ChatTemplate::FromConfig(
      R"({"chat_template": "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}x"})");
  ASSERT_TRUE(strict.ok());
  auto refused = ValidateGenerateRequest(Chat({{"assistant", "hi"}}), limits_, tokenizer_.get(),
                                         strict->get());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("prompt.chat: chat template: line 1: first message must be from the user"));
}

}  // namespace
}  // namespace pdserve::wire
