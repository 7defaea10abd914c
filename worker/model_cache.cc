#include "worker/model_cache.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "proto/job_options.h"

namespace lact {

absl::StatusOr<std::unique_ptr<ModelCache>> ModelCache::Create(const std::string& model_dir) {
  auto cache = std::unique_ptr<ModelCache>(new ModelCache());
  for (const char* preset : {"small", "base"}) {
    LACT_ASSIGN_OR_RETURN(cache->catalog_[absl::StrCat("preset:", preset)], PresetConfig(preset));
  }
  if (model_dir.empty()) return cache;
  std::error_code ec;
  std::filesystem::directory_iterator it(model_dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("model dir '", model_dir, "': ", ec.message()));
  for (const auto& entry : it) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::string path = entry.path().string(), name = entry.path().stem().string();
    LACT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
    auto meta = file.metadata().find("lact.config");
    if (meta == file.metadata().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", path, "': no __metadata__[\"lact.config\"]"));
    }
    absl::StatusOr<ModelConfig> config = ParseModelConfig(meta->second);
    if (!config.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("model '", path, "': ", config.status().message()));
    cache->catalog_[name] = *config;
    cache->paths_[name] = path;
  }
  return cache;
}

absl::StatusOr<std::shared_ptr<const Model>> ModelCache::Get(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < loaded_.size(); ++i) {
    if (loaded_[i].first == name) {
      auto entry = loaded_[i];
      loaded_.erase(loaded_.begin() + i);
      loaded_.push_back(entry);
      return entry.second;
    }
  }
  std::shared_ptr<const Model> model;
  if (absl::StartsWith(name, "preset:")) {
    LACT_ASSIGN_OR_RETURN(Model m, ResolveModel(name));
    model = std::make_shared<const Model>(std::move(m));
  } else {
    auto path = paths_.find(name);
    if (path == paths_.end())
      return absl::NotFoundError(absl::StrCat("this worker has no model '", name, "'"));
    LACT_ASSIGN_OR_RETURN(Model m, LoadModel(path->second));
    model = std::make_shared<const Model>(std::move(m));
  }
  loaded_.emplace_back(name, model);
  if (loaded_.size() > kKeep) loaded_.erase(loaded_.begin());
  return model;
}

absl::StatusOr<JobModel> ResolveJobModel(ModelCache& models, const std::string& name,
                                         const v1::JobOptions& options) {
  JobModel m;
  LACT_ASSIGN_OR_RETURN(m.model, models.Get(name));
  LACT_ASSIGN_OR_RETURN(m.config, ApplyJobOptions(m.model->config(), FromProto(options)));
  return m;
}

}  // namespace lact
