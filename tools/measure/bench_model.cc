#include "tools/measure/bench_model.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"

namespace pdserve::measure {

absl::StatusOr<BenchModel> LoadBenchModel(const std::string& dir, const std::string& preset,
                                          const std::string& bench) {
  BenchModel model;
  model.dir = dir;
  if (model.dir.empty()) {
    model.dir = "models/" + preset;
    Progress(bench, absl::StrCat("no --model: using the ", preset, " preset at ", model.dir));
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset(preset));
    RETURN_IF_ERROR(tools::EnsureModel(spec, model.dir));
  }
  std::ifstream config_file(model.dir + "/config.json");
  if (!config_file)
    return absl::NotFoundError(absl::StrCat("--model: ", model.dir, "/config.json: cannot open"));
  std::stringstream config_text;
  config_text << config_file.rdbuf();
  ASSIGN_OR_RETURN(model.config, ModelConfig::FromJson(config_text.str()));
  return model;
}

}  // namespace pdserve::measure
