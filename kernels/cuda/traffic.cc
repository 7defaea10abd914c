#include "kernels/cuda/traffic.h"

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lact::cuda {
namespace {

struct Table {
  absl::Mutex mu;
  std::map<std::string, FamilyTraffic> families ABSL_GUARDED_BY(mu);
};

Table& Process() {
  static Table* const table = new Table;
  return *table;
}

}  // namespace

void NoteLaunch(const char* family, int64_t bytes_read, int64_t bytes_written, int64_t launches) {
  Table& t = Process();
  absl::MutexLock lock(&t.mu);
  FamilyTraffic& f = t.families[family];
  f.launches += launches;
  f.bytes_read += bytes_read;
  f.bytes_written += bytes_written;
}

std::map<std::string, FamilyTraffic> TrafficByFamily() {
  Table& t = Process();
  absl::MutexLock lock(&t.mu);
  return t.families;
}

void ResetTraffic() {
  Table& t = Process();
  absl::MutexLock lock(&t.mu);
  t.families.clear();
}

}  // namespace lact::cuda
