// `lact run` in the lact binary: the lact-run binary beside it, which alone
// links the compute stack.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "client/cli/run_command.h"

namespace lact::cli {

absl::Status ExecRun(const std::vector<std::string>& args) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string path = (self.parent_path() / "lact-run").string();
  std::vector<char*> argv = {const_cast<char*>("lact-run")};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execv(path.c_str(), argv.data());
  return absl::FailedPreconditionError(
      absl::StrCat("cannot start ", path, ": ", std::strerror(errno),
                   " (lact run is lact-run, installed beside lact)"));
}

}  // namespace lact::cli
