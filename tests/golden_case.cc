#include "tests/golden_case.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace lact::testing {

std::string GoldenDir() {
  if (const char* dir = std::getenv("LACT_GOLDEN_DIR")) return dir;
  return LACT_GOLDEN_DIR;
}

std::vector<std::string> GoldenCaseNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenDir(), ec)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& name) {
  const std::string dir = GoldenDir() + "/" + name;
  LACT_ASSIGN_OR_RETURN(Model model, LoadModel(dir + "/model.safetensors"));
  LACT_ASSIGN_OR_RETURN(SafetensorsFile expected,
                        SafetensorsFile::Open(dir + "/expected.safetensors"));
  JobOptions options;
  if (auto it = expected.metadata().find("job.options"); it != expected.metadata().end()) {
    LACT_ASSIGN_OR_RETURN(options, ParseJobOptions(it->second));
  }
  LACT_ASSIGN_OR_RETURN(ModelConfig config, ApplyJobOptions(model.config(), options));
  LACT_ASSIGN_OR_RETURN(Tensor context, ReadNpy(dir + "/context.npy"));
  std::vector<Tensor> queries;
  for (int k = 0;; ++k) {
    const std::string path = absl::StrCat(dir, "/query_", k, ".npy");
    if (!std::filesystem::exists(path)) break;
    LACT_ASSIGN_OR_RETURN(Tensor q, ReadNpy(path));
    queries.push_back(std::move(q));
  }
  std::map<std::string, TensorD> want;
  for (const auto& [tensor_name, entry] : expected.entries()) {
    LACT_ASSIGN_OR_RETURN(want[tensor_name], expected.ReadDouble(tensor_name));
  }
  return GoldenCase{name,           std::move(model),   config,
                    options,        std::move(context), std::move(queries),
                    std::move(want)};
}

template <typename G, typename W>
double RelativeError(const BasicTensor<G>& got, const BasicTensor<W>& want) {
  if (got.shape != want.shape) return std::numeric_limits<double>::infinity();
  double max_diff = 0, max_want = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got.data[i]), w = static_cast<double>(want.data[i]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    max_diff = std::max(max_diff, std::abs(g - w));
    max_want = std::max(max_want, std::abs(w));
  }
  return max_want > 0 ? max_diff / max_want : max_diff;
}

template double RelativeError(const BasicTensor<float>&, const BasicTensor<double>&);
template double RelativeError(const BasicTensor<double>&, const BasicTensor<double>&);
template double RelativeError(const BasicTensor<float>&, const BasicTensor<float>&);

}  // namespace lact::testing
