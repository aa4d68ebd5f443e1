#include "tools/pdctl/cluster_config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pdserve::pdctl {
namespace {

// Reads a mapping, rejecting keys it does not know (a typo must not silently keep a default).
class Mapping {
 public:
  Mapping(const YAML::Node& node, std::string where, std::string file)
      : node_(node), where_(std::move(where)), file_(std::move(file)) {}

  absl::Status Check(const std::set<std::string>& known) const {
    if (!node_.IsDefined() || node_.IsNull()) return absl::OkStatus();
    if (!node_.IsMap()) return Error(where_, "must be a mapping");
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (!known.contains(key)) {
        return Error(Key(key),
                     absl::StrCat("unknown key (known: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Get(const std::string& key, T* out) const {
    if (!node_.IsDefined() || node_.IsNull() || !node_[key]) return absl::OkStatus();
    try {
      *out = node_[key].as<T>();
    } catch (const YAML::Exception&) {
      return Error(Key(key), "has the wrong type");
    }
    return absl::OkStatus();
  }
  YAML::Node operator[](const std::string& key) const {
    return node_.IsMap() ? node_[key] : YAML::Node();
  }
  std::string Key(const std::string& key) const {
    return where_.empty() ? key : absl::StrCat(where_, ".", key);
  }
  absl::Status Error(const std::string& key, const std::string& problem) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", key, ": ", problem));
  }

 private:
  YAML::Node node_;
  std::string where_;
  std::string file_;
};

absl::Status ReadProcess(const Mapping& m, bool worker, ProcessSpec* p) {
  std::set<std::string> known = {"name", "cpus", "nice", "flags", "exec_prefix"};
  if (worker) known.insert("threads");
  if (absl::Status s = m.Check(known); !s.ok()) return s;
  if (absl::Status s = m.Get("name", &p->name); !s.ok()) return s;
  if (absl::Status s = m.Get("threads", &p->threads); !s.ok()) return s;
  if (absl::Status s = m.Get("cpus", &p->cpus); !s.ok()) return s;
  if (absl::Status s = m.Get("nice", &p->nice); !s.ok()) return s;
  if (absl::Status s = m.Get("flags", &p->flags); !s.ok()) return s;
  if (absl::Status s = m.Get("exec_prefix", &p->exec_prefix); !s.ok()) return s;
  if (p->nice < 0 || p->nice > 19) {
    return m.Error(
        m.Key("nice"),
        absl::StrCat(p->nice, " is outside [0, 19] (raising priority needs privileges)"));
  }
  if (p->threads < 0) return m.Error(m.Key("threads"), "must be >= 0 (0: all hardware threads)");
  for (int cpu : p->cpus) {
    if (cpu < 0 || cpu >= 1024)
      return m.Error(m.Key("cpus"), absl::StrCat(cpu, " is not a CPU number"));
  }
  return absl::OkStatus();
}

absl::Status ReadWorkers(const YAML::Node& node, const std::string& role, const std::string& file,
                         std::vector<ProcessSpec>* out) {
  if (!node) return absl::OkStatus();
  if (!node.IsSequence())
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", role, ": must be a list"));
  for (size_t i = 0; i < node.size(); ++i) {
    ProcessSpec p;
    p.name = absl::StrCat(role, "-", i);
    if (absl::Status s =
            ReadProcess(Mapping(node[i], absl::StrCat(role, "[", i, "]"), file), true, &p);
        !s.ok()) {
      return s;
    }
    out->push_back(std::move(p));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& text, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not valid YAML: ", e.what()));
  }
  ClusterConfig c;
  Mapping top(root, "", file);
  if (absl::Status s = top.Check({"run_dir", "model", "ucx_transports", "router", "prefill",
                                  "decode", "startup_timeout_s"});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = top.Get("run_dir", &c.run_dir); !s.ok()) return s;
  if (absl::Status s = top.Get("ucx_transports", &c.ucx_transports); !s.ok()) return s;
  double startup_s = absl::ToDoubleSeconds(c.startup_timeout);
  if (absl::Status s = top.Get("startup_timeout_s", &startup_s); !s.ok()) return s;
  c.startup_timeout = absl::Seconds(startup_s);

  Mapping model(top["model"], "model", file);
  if (absl::Status s = model.Check({"dir", "preset", "weights", "max_position_embeddings"});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = model.Get("dir", &c.model_dir); !s.ok()) return s;
  if (absl::Status s = model.Get("preset", &c.model_preset); !s.ok()) return s;
  if (absl::Status s = model.Get("weights", &c.model_weights); !s.ok()) return s;
  if (absl::Status s = model.Get("max_position_embeddings", &c.model_max_position_embeddings);
      !s.ok()) {
    return s;
  }
  if (c.model_max_position_embeddings < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": model.max_position_embeddings: must be >= 0"));
  }

  Mapping router(top["router"], "router", file);
  if (absl::Status s = router.Check({"listen", "registry_listen", "metrics_listen", "http_listen",
                                     "policy", "cost_model", "cpus", "flags"});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = router.Get("listen", &c.router_listen); !s.ok()) return s;
  if (absl::Status s = router.Get("metrics_listen", &c.router_metrics_listen); !s.ok()) return s;
  if (absl::Status s = router.Get("http_listen", &c.router_http_listen); !s.ok()) return s;
  if (absl::Status s = router.Get("registry_listen", &c.router_registry_listen); !s.ok()) return s;
  if (absl::Status s = router.Get("policy", &c.policy); !s.ok()) return s;
  if (absl::Status s = router.Get("cost_model", &c.cost_model); !s.ok()) return s;
  c.router.name = "router";
  if (absl::Status s = router.Get("cpus", &c.router.cpus); !s.ok()) return s;
  if (absl::Status s = router.Get("flags", &c.router.flags); !s.ok()) return s;

  if (absl::Status s = ReadWorkers(root["prefill"], "prefill", file, &c.prefill); !s.ok()) return s;
  if (absl::Status s = ReadWorkers(root["decode"], "decode", file, &c.decode); !s.ok()) return s;
  if (c.decode.empty())
    return absl::InvalidArgumentError(absl::StrCat(file, ": decode: at least one decode worker"));
  std::set<std::string> names = {"router"};
  for (const auto* list : {&c.prefill, &c.decode}) {
    for (const ProcessSpec& p : *list) {
      if (!names.insert(p.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": name '", p.name, "' is used twice"));
      }
    }
  }
  if (c.startup_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": startup_timeout_s: must be > 0"));
  }
  return c;
}

absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("-f: cannot open '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseClusterConfig(text.str(), path);
}

}  // namespace pdserve::pdctl
