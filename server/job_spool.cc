#include "server/job_spool.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/data_files.h"

namespace lact::server {
namespace {

constexpr char kSuffix[] = ".spool.npy";

}  // namespace

absl::Status JobSpool::Open(const std::set<std::string>& keep) {
  if (dir_.empty()) return absl::OkStatus();
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--spool-dir ", dir_, ": cannot create it: ", error.message()));
  }
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace, error);
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, error)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, kSuffix)) continue;
    const std::string job_id = name.substr(0, name.size() - std::strlen(kSuffix));
    if (keep.count(job_id) == 0) {
      fs::remove(entry.path(), error);
      continue;
    }
    const auto bytes = static_cast<int64_t>(fs::file_size(entry.path(), error));
    absl::MutexLock lock(&mu_);
    bytes_[job_id] = bytes;
    used_ += bytes;
  }
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat("--spool-dir ", dir_, ": ", error.message()));
  }
  return absl::OkStatus();
}

std::string JobSpool::FileName(const std::string& job_id) { return absl::StrCat(job_id, kSuffix); }

std::string JobSpool::PathOf(const std::string& job_id) const {
  return absl::StrCat(dir_, "/", FileName(job_id));
}

absl::StatusOr<std::string> JobSpool::Create(const std::string& job_id, int64_t tokens,
                                             int64_t width, WireType dtype) {
  if (dir_.empty()) return absl::FailedPreconditionError("the coordinator has no --spool-dir");
  const int64_t bytes = tokens * width * WireBytes(dtype);
  {
    absl::MutexLock lock(&mu_);
    if (bytes_.count(job_id) != 0) return absl::AlreadyExistsError(job_id + " is spooled already");
    if (used_ + bytes > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("the spool holds ", used_, " bytes; ", bytes,
                                                       " more would pass its ", max_bytes_,
                                                       " (--spool-bytes)"));
    }
    used_ += bytes;
    bytes_[job_id] = bytes;
  }
  const std::string path = PathOf(job_id);
  if (absl::StatusOr<ReadyFile> created =
          CreateTokenFile(DataPath{dir_, FileName(job_id)}, tokens, width, dtype);
      !created.ok()) {
    Remove(job_id);
    return created.status();
  }
  return path;
}

void JobSpool::Remove(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = bytes_.find(job_id);
    if (it == bytes_.end()) return;
    used_ -= it->second;
    bytes_.erase(it);
  }
  unlink(PathOf(job_id).c_str());
}

int64_t JobSpool::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

}  // namespace lact::server
