// A fuzz input as a file the loaders can open: an anonymous memory file
// (memfd) named through /proc/self/fd. Closed at scope exit.
#ifndef LACT_TOOLS_FUZZ_FUZZ_FILE_H_
#define LACT_TOOLS_FUZZ_FUZZ_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace lact::fuzz {

class FuzzFile {
 public:
  FuzzFile(const uint8_t* data, size_t size) : fd_(memfd_create("lact-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      const ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  FuzzFile(const FuzzFile&) = delete;
  FuzzFile& operator=(const FuzzFile&) = delete;
  ~FuzzFile() { close(fd_); }

  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace lact::fuzz

#endif  // LACT_TOOLS_FUZZ_FUZZ_FILE_H_
