// Files named inside a folder the operator chose (the data root, a spool
// folder), reached only through that folder: each open walks the name one
// component at a time from a handle of the folder, never following a
// symlink and never taking "..", at the moment of use and by the process
// that uses it. So a folder inside the root swapped for a symlink after a
// job was admitted makes its open fail; it never reaches a file outside.
//
// Only regular files are opened: a FIFO, device, socket or symlink is
// refused from its lstat and again from the open descriptor (opened
// non-blocking, so a FIFO swapped in between cannot hang the caller).
// Errors name the file by its path inside the folder, never by where a
// symlink points or what lies outside: NOT_FOUND for a missing file or
// folder, PERMISSION_DENIED for a symlink, an escaping name or a folder the
// process may not enter, INVALID_ARGUMENT for a name that is malformed or
// not a regular file, ALREADY_EXISTS for an output that exists and may not
// be replaced. Stateless functions; safe from any thread.
#ifndef LACT_COMMON_DATA_PATH_H_
#define LACT_COMMON_DATA_PATH_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lact {

// The longest path a reference may name, in bytes.
inline constexpr size_t kMaxDataPathBytes = 4096;

// A file inside `root`: `relative` is its components joined by '/', none
// empty, "." or "..".
struct DataPath {
  std::string root;
  std::string relative;

  // `path`'s folder as the root and its file name as the relative path: for
  // callers that chose the path themselves (tools, tests, the spool).
  static DataPath Split(const std::string& path);
  // What errors show: the path inside the root.
  const std::string& shown() const { return relative; }
  bool empty() const { return relative.empty(); }
};

// A file's identity (device and inode): a job tells its output from its
// context under any name, and removes only the output it created.
struct FileId {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileId& o) const { return device == o.device && inode == o.inode; }
  bool operator!=(const FileId& o) const { return !(*this == o); }
};

// A file descriptor, closed when the handle goes. Movable.
class FileHandle {
 public:
  FileHandle() = default;
  explicit FileHandle(int fd) : fd_(fd) {}
  FileHandle(FileHandle&& other) noexcept : fd_(other.release()) {}
  FileHandle& operator=(FileHandle&& other) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle();

  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// The file `ref` names, checked by its text alone (nothing is opened):
// `ref` is a path relative to `root`, an absolute path under `root`, or a
// file:///absolute/path URI. With a `folder` (a tenant's), the name is taken
// inside ROOT/FOLDER instead: relative paths start there, absolute ones
// must lie under it. FAILED_PRECONDITION when `root` is empty (this
// process takes no files by reference), PERMISSION_DENIED for a path
// outside, INVALID_ARGUMENT for "..", an empty name or one over
// kMaxDataPathBytes.
absl::StatusOr<DataPath> ResolveDataPath(const std::string& root, const std::string& ref,
                                         const std::string& folder = "");

// Opens a regular file for `flags` (O_RDONLY, O_RDWR or O_WRONLY, with
// O_DIRECT if wanted); `id` (optional) receives its identity.
absl::StatusOr<FileHandle> OpenDataFile(const DataPath& path, int flags, FileId* id = nullptr);

// The identity of the regular file at `path`, nullopt when its folder has
// no such name (NOT_FOUND when a folder on the way is missing).
absl::StatusOr<std::optional<FileId>> ExistingDataFile(const DataPath& path);

// Creates `path` for reading and writing, exclusively: if a file of that
// name exists, ALREADY_EXISTS unless `replace`, and then only a regular
// file is opened (never truncated here). `*created` says whether this call
// made the file; `id` receives its identity.
absl::StatusOr<FileHandle> CreateDataFile(const DataPath& path, bool replace, bool* created,
                                          FileId* id);

// Removes `path` if it is still the file `id` (a job's own output or
// spool); OK when it is already gone, FAILED_PRECONDITION when another file
// has taken its name (it is left alone).
absl::Status RemoveDataFile(const DataPath& path, const FileId& id);

}  // namespace lact

#endif  // LACT_COMMON_DATA_PATH_H_
