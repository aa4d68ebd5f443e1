#include "router/model_catalog.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace pdserve::router {

absl::StatusOr<std::unique_ptr<ModelCatalog>> ModelCatalog::Load(
    const std::vector<std::string>& dirs) {
  if (dirs.empty())
    return absl::InvalidArgumentError("--model: at least one model directory is required");
  auto catalog = std::make_unique<ModelCatalog>();
  for (const std::string& dir : dirs) {
    auto m = std::make_unique<CatalogModel>();
    m->dir = dir;
    std::filesystem::path path(dir);
    while (!path.empty() && path.filename().empty()) path = path.parent_path();  // Trailing '/'.
    m->name = path.filename().string();
    std::ifstream in(dir + "/config.json");
    if (!in)
      return absl::NotFoundError(absl::StrCat("--model: ", dir, "/config.json: cannot open"));
    std::stringstream text;
    text << in.rdbuf();
    auto config = ModelConfig::FromJson(text.str());
    if (!config.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/config.json: ", config.status().message()));
    m->config = *std::move(config);
    if (std::filesystem::exists(dir + "/tokenizer.json")) {
      auto tokenizer = text::Tokenizer::FromFile(dir + "/tokenizer.json");
      if (!tokenizer.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, "/tokenizer.json: ", tokenizer.status().message()));
      }
      m->tokenizer = *std::move(tokenizer);
    }
    auto chat_template = text::ChatTemplate::FromModelDir(dir);
    if (chat_template.ok()) {
      m->chat_template = *std::move(chat_template);
    } else if (!absl::IsNotFound(chat_template.status())) {
      // A template this router cannot run (say, a tag outside the supported subset) must not
      // stop it serving text and token prompts; chat requests get the reason.
      m->chat_template_error = std::string(chat_template.status().message());
      PDS_LOG(WARNING) << "model '" << m->name
                       << "': chat prompts are refused: " << m->chat_template_error;
    }
    for (const auto& other : catalog->models_) {
      if (other->name == m->name) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model: two directories named '", m->name, "'"));
      }
    }
    catalog->models_.push_back(std::move(m));
  }
  return catalog;
}

absl::StatusOr<const CatalogModel*> ModelCatalog::Find(const std::string& name) const {
  if (name.empty()) {
    if (models_.size() == 1) return models_[0].get();
    return absl::InvalidArgumentError("model: must be set (this cluster serves several models)");
  }
  for (const auto& m : models_) {
    if (m->name == name) return m.get();
  }
  std::vector<std::string> names;
  for (const auto& m : models_) names.push_back(m->name);
  return absl::NotFoundError(
      absl::StrCat("model: '", name, "' is not served here; served: ", absl::StrJoin(names, ", ")));
}

}  // namespace pdserve::router
