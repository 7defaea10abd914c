#include "client/cli/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lact::cli {

absl::Status CheckOutputFile(const std::string& flag, const std::string& path) {
  if (!absl::EndsWith(path, ".safetensors")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " ", path, ": lact writes safetensors files; name it NAME.safetensors"));
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, " is a folder"));
    }
    if (access(path.c_str(), W_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " ", path, " cannot be written: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, " cannot be created: ", std::strerror(errno)));
  }
  close(fd);
  unlink(path.c_str());
  return absl::OkStatus();
}

}  // namespace lact::cli
