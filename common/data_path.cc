#include "common/data_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/error_text.h"
#include "common/status_macros.h"

namespace lact {
namespace {

// A path or name a caller gave, quoted in an error (at most 200 bytes of it).
std::string Quoted(absl::string_view text) { return absl::StrCat("'", ErrorQuote(text, 200), "'"); }

std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The rest of `path` after the folder `root`, or nullopt-like false.
bool StripFolder(absl::string_view path, const std::string& root, absl::string_view* rest) {
  if (root == "/") {
    *rest = path;
    return true;
  }
  if (!absl::StartsWith(path, root)) return false;
  absl::string_view tail = path.substr(root.size());
  if (!tail.empty() && tail.front() != '/') return false;
  *rest = tail;
  return true;
}

const char* Kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISLNK(mode)) return "a symlink";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

absl::Status NotRegular(const DataPath& path, mode_t mode) {
  if (S_ISLNK(mode)) {
    return absl::PermissionDeniedError(absl::StrCat(
        Quoted(path.shown()), " is a symlink; symlinks are not followed inside the data root"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Quoted(path.shown()), " is ", Kind(mode), ", not a regular file"));
}

absl::Status OpenError(const DataPath& path, const std::string& what, int err) {
  const std::string message = absl::StrCat(Quoted(path.shown()), ": ", what);
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(message, " does not exist"));
    case ENOTDIR:
    case ELOOP:
      return absl::PermissionDeniedError(absl::StrCat(
          message, " is not a folder (symlinks are not followed inside the data root)"));
    default:
      return absl::PermissionDeniedError(absl::StrCat(message, ": ", std::strerror(err)));
  }
}

FileId IdOf(const struct stat& st) { return FileId{st.st_dev, st.st_ino}; }

// lstat of `name` in `folder` into `st`: NOT_FOUND when there is none.
absl::Status StatIn(const DataPath& path, int folder, const std::string& name, struct stat* st) {
  if (fstatat(folder, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0) return absl::OkStatus();
  if (errno == ENOENT)
    return absl::NotFoundError(absl::StrCat(Quoted(path.shown()), " does not exist"));
  return absl::PermissionDeniedError(
      absl::StrCat(Quoted(path.shown()), ": ", std::strerror(errno)));
}

// A handle of the folder holding `path`'s file, reached component by
// component; `name` receives the file's own name.
absl::StatusOr<FileHandle> OpenFolderOf(const DataPath& path, std::string* name) {
  FileHandle folder(open(path.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (folder.get() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the data folder cannot be opened: ", std::strerror(errno)));
  }
  const std::vector<std::string> parts = absl::StrSplit(path.relative, '/');
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(Quoted(path.shown()), " is not a plain path inside its folder"));
    }
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const int next =
        openat(folder.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      const std::string prefix =
          absl::StrJoin(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i) + 1, "/");
      return OpenError(path, absl::StrCat("its folder '", prefix, "'"), errno);
    }
    folder = FileHandle(next);
  }
  *name = parts.back();
  return folder;
}

// Opens `name` in `folder` for `flags`, a regular file only.
absl::StatusOr<FileHandle> OpenRegular(const DataPath& path, int folder, const std::string& name,
                                       int flags, FileId* id) {
  struct stat st;
  LACT_RETURN_IF_ERROR(StatIn(path, folder, name, &st));
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  FileHandle file(openat(folder, name.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno == ELOOP) return NotRegular(path, S_IFLNK);
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat(Quoted(path.shown()), " does not exist"));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", Quoted(path.shown()), ": ", std::strerror(errno)));
  }
  if (fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  const int status_flags = fcntl(file.get(), F_GETFL);
  if (status_flags >= 0) fcntl(file.get(), F_SETFL, status_flags & ~O_NONBLOCK);
  if (id != nullptr) *id = IdOf(st);
  return file;
}

}  // namespace

DataPath DataPath::Split(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return DataPath{".", path};
  return DataPath{slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) close(fd_);
}

int FileHandle::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::StatusOr<DataPath> ResolveDataPath(const std::string& root, const std::string& ref,
                                         const std::string& folder) {
  if (root.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Quoted(ref),
                     " names a file, but this cluster has no data root "
                     "(start it with --data-root DIR to allow files by reference)"));
  }
  if (ref.empty()) return absl::InvalidArgumentError("DataRef.path is empty");
  if (ref.size() > kMaxDataPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataRef.path is ", ref.size(), " bytes; at most ", kMaxDataPathBytes));
  }
  absl::string_view name = ref;
  if (absl::ConsumePrefix(&name, "file://") && !absl::StartsWith(name, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(ref), ": only file:///absolute/path URIs are allowed"));
  }
  if (folder == "." || folder == ".." || absl::StrContains(folder, '/')) {
    return absl::PermissionDeniedError(
        absl::StrCat("tenant folder ", Quoted(folder), " cannot be a folder of the data root"));
  }
  const std::string base = folder.empty() ? WithoutTrailingSlashes(root)
                                          : absl::StrCat(WithoutTrailingSlashes(root), "/", folder);
  if (absl::StartsWith(name, "/")) {
    absl::string_view rest;
    char real[PATH_MAX];
    const bool under =
        StripFolder(name, base, &rest) ||
        (realpath(root.c_str(), real) != nullptr &&
         StripFolder(name, folder.empty() ? std::string(real) : absl::StrCat(real, "/", folder),
                     &rest));
    if (!under) {
      return absl::PermissionDeniedError(
          absl::StrCat(Quoted(ref), " is outside ",
                       folder.empty() ? "the data root" : "your folder of the data root",
                       " (name files by their path inside it, or absolute under ", base, ")"));
    }
    name = rest;
  }
  std::vector<std::string> parts;
  if (!folder.empty()) parts.push_back(folder);
  for (absl::string_view part : absl::StrSplit(name, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      return absl::PermissionDeniedError(
          absl::StrCat(Quoted(ref),
                       ": '..' is not followed inside the data root (outside the data root "
                       "is never reached)"));
    }
    parts.emplace_back(part);
  }
  if (parts.size() == (folder.empty() ? 0u : 1u) || absl::EndsWith(name, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(Quoted(ref), " does not name a file"));
  }
  return DataPath{root, absl::StrJoin(parts, "/")};
}

absl::StatusOr<FileHandle> OpenDataFile(const DataPath& path, int flags, FileId* id) {
  std::string name;
  LACT_ASSIGN_OR_RETURN(FileHandle folder, OpenFolderOf(path, &name));
  return OpenRegular(path, folder.get(), name, flags, id);
}

absl::StatusOr<std::optional<FileId>> ExistingDataFile(const DataPath& path) {
  std::string name;
  LACT_ASSIGN_OR_RETURN(FileHandle folder, OpenFolderOf(path, &name));
  struct stat st;
  if (absl::Status s = StatIn(path, folder.get(), name, &st); !s.ok()) {
    if (absl::IsNotFound(s)) return std::nullopt;
    return s;
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return IdOf(st);
}

absl::StatusOr<FileHandle> CreateDataFile(const DataPath& path, bool replace, bool* created,
                                          FileId* id) {
  std::string name;
  LACT_ASSIGN_OR_RETURN(FileHandle folder, OpenFolderOf(path, &name));
  FileHandle file(
      openat(folder.get(), name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (file.get() >= 0) {
    struct stat st;
    if (fstat(file.get(), &st) != 0) {
      return absl::InternalError(absl::StrCat("fstat ", Quoted(path.shown()), " failed"));
    }
    *created = true;
    *id = IdOf(st);
    return file;
  }
  if (errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", Quoted(path.shown()), ": ", std::strerror(errno)));
  }
  if (!replace) {
    return absl::AlreadyExistsError(absl::StrCat(
        "output ", Quoted(path.shown()),
        " exists; a job never replaces a file unless asked (DataRef.replace, lact submit "
        "--replace)"));
  }
  *created = false;
  return OpenRegular(path, folder.get(), name, O_RDWR, id);
}

absl::Status RemoveDataFile(const DataPath& path, const FileId& id) {
  std::string name;
  absl::StatusOr<FileHandle> folder = OpenFolderOf(path, &name);
  if (!folder.ok()) {
    return absl::IsNotFound(folder.status()) ? absl::OkStatus() : folder.status();
  }
  struct stat st;
  if (!StatIn(path, folder->get(), name, &st).ok()) return absl::OkStatus();  // gone already
  if (IdOf(st) != id) {
    return absl::FailedPreconditionError(
        absl::StrCat(Quoted(path.shown()), " is another file now; it is left alone"));
  }
  if (unlinkat(folder->get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot remove ", Quoted(path.shown()), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace lact
