// The models a worker serves: every NAME.safetensors in its model dir (as
// model NAME) and the presets (preset:small[:SEED], preset:base[:SEED]).
// Catalog() lists them with their configs (read from headers only); Get()
// loads on first use and keeps the most recent few. Thread-safe.
#ifndef LACT_WORKER_MODEL_CACHE_H_
#define LACT_WORKER_MODEL_CACHE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/model.h"
#include "lact/v1/common.pb.h"

namespace lact {

class ModelCache {
 public:
  // Scans `model_dir` ("" = presets only); a file whose header does not
  // parse is an error naming it.
  static absl::StatusOr<std::unique_ptr<ModelCache>> Create(const std::string& model_dir);

  // name (ModelKey form: "NAME" or "preset:small") -> config.
  const std::map<std::string, ModelConfig>& Catalog() const { return catalog_; }

  absl::StatusOr<std::shared_ptr<const Model>> Get(const std::string& name);

 private:
  static constexpr size_t kKeep = 2;

  std::map<std::string, ModelConfig> catalog_;
  std::map<std::string, std::string> paths_;  // file models
  absl::Mutex mu_;
  std::vector<std::pair<std::string, std::shared_ptr<const Model>>> loaded_
      ABSL_GUARDED_BY(mu_);  // most recent last
};

// A job's model as its options make it.
struct JobModel {
  std::shared_ptr<const Model> model;
  ModelConfig config;  // with the job's overrides
};

// Model `name` from `models` with the job's `options` applied; the cache's
// error, or INVALID_ARGUMENT for options the model does not take.
absl::StatusOr<JobModel> ResolveJobModel(ModelCache& models, const std::string& name,
                                         const v1::JobOptions& options);

}  // namespace lact

#endif  // LACT_WORKER_MODEL_CACHE_H_
