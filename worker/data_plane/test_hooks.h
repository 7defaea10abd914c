// Faults a test can ask a worker for, to check what clients make of them:
// read once from the environment variable LACT_TEST_HOOKS, a comma-
// separated list of NAME=VALUE. Unset (as in every deployment) they do
// nothing. Unknown names are ignored.
//   hold-transfer-end-ms=N  a Transfer stream that sent its completion
//                           message waits N ms before it ends (its
//                           trailers), so a test can kill the worker there
//   corrupt-output=1        the first output message of each stream leaves
//                           with one bit flipped (after it was checksummed)
//   exit-after-outputs=K    the worker process exits (status 9, as if
//                           killed) once a stream has sent K output
//                           messages
#ifndef LACT_WORKER_DATA_PLANE_TEST_HOOKS_H_
#define LACT_WORKER_DATA_PLANE_TEST_HOOKS_H_

#include <cstdint>

namespace lact {

struct TestHooks {
  int64_t hold_transfer_end_ms = 0;
  bool corrupt_output = false;
  int64_t exit_after_outputs = 0;  // 0: never
};

// The hooks LACT_TEST_HOOKS asks for (read on the first call).
const TestHooks& GetTestHooks();

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_TEST_HOOKS_H_
