// One piece of a shard's results as it is sent and retained: rows of an
// output set, or one fused-state tensor; and the job tickets that guard
// them.
#ifndef LACT_WORKER_RESULT_ITEM_H_
#define LACT_WORKER_RESULT_ITEM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/fused_state.h"
#include "common/tensor.h"

namespace lact {

struct ResultItem {
  int set = 0;             // 0 = context outputs, k + 1 = query set k
  int64_t offset = 0;      // first token, as the client numbers it
  std::string state_name;  // non-empty: a fused-state tensor (docs/model.md, The fused state name)
  std::shared_ptr<const Tensor> tensor;
};

// The fused state's tensors as items, each keeping `state` alive.
std::vector<ResultItem> StateItems(const std::shared_ptr<const FusedState>& state);

// Compares two job tickets in time independent of where they differ.
bool TicketsEqual(const std::string& a, const std::string& b);

}  // namespace lact

#endif  // LACT_WORKER_RESULT_ITEM_H_
