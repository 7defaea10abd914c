#include "worker/data_plane/test_hooks.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace lact {
namespace {

TestHooks ReadHooks() {
  TestHooks hooks;
  const char* env = std::getenv("LACT_TEST_HOOKS");
  if (env == nullptr) return hooks;
  for (absl::string_view item : absl::StrSplit(env, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    int64_t value = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &value)) continue;
    if (kv[0] == "hold-transfer-end-ms") hooks.hold_transfer_end_ms = value;
    if (kv[0] == "corrupt-output") hooks.corrupt_output = value != 0;
    if (kv[0] == "exit-after-outputs") hooks.exit_after_outputs = value;
  }
  return hooks;
}

}  // namespace

const TestHooks& GetTestHooks() {
  static const TestHooks hooks = ReadHooks();
  return hooks;
}

}  // namespace lact
