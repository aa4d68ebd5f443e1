// The models the router serves: for each model directory it was given, the name clients use
// (the directory's base name, as workers report it), config.json and the tokenizer, so that
// the router validates and tokenizes requests itself, hashes their blocks for the prefix
// index, and computes uncached lengths before any worker is touched; and the chat template, so
// that it renders conversations itself. Weights are not loaded.
// Thread-safety: immutable after Load().
#ifndef PDSERVE_ROUTER_MODEL_CATALOG_H_
#define PDSERVE_ROUTER_MODEL_CATALOG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace pdserve::router {

struct CatalogModel {
  std::string name;
  std::string dir;
  ModelConfig config;
  std::unique_ptr<text::Tokenizer> tokenizer;  // Null: token-id prompts only.
  // Null: chat prompts are refused, naming chat_template_error when the template exists but
  // could not be loaded (the router still serves text and token prompts then).
  std::unique_ptr<text::ChatTemplate> chat_template;
  std::string chat_template_error;
};

class ModelCatalog {
 public:
  static absl::StatusOr<std::unique_ptr<ModelCatalog>> Load(const std::vector<std::string>& dirs);

  // The model named `name`; an empty name selects the only model. NOT_FOUND names the
  // served models; INVALID_ARGUMENT when the name is empty and several are served.
  absl::StatusOr<const CatalogModel*> Find(const std::string& name) const;
  const std::vector<std::unique_ptr<CatalogModel>>& models() const { return models_; }

 private:
  std::vector<std::unique_ptr<CatalogModel>> models_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_MODEL_CATALOG_H_
