// One piece of a shard's results as it is sent and retained: rows of an
// output set, or one fused-state tensor; and the job tickets that guard
// them.
#ifndef LACT_WORKER_DATA_PLANE_RESULT_ITEM_H_
#define LACT_WORKER_DATA_PLANE_RESULT_ITEM_H_

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
  // An output set's rows of `tensor` this item is: [first_row, first_row +
  // rows), or all of them (rows < 0). Items of one shard's context outputs
  // share its output tensor.
  int64_t first_row = 0;
  int64_t rows = -1;

  int64_t row_count() const { return rows < 0 ? tensor->dim(0) : rows; }
  // Of the item's own rows (or whole state tensor).
  int64_t bytes() const { return 4 * (rows < 0 ? tensor->size() : rows * tensor->dim(1)); }
};

// The fused state's tensors as items, each keeping `state` alive.
std::vector<ResultItem> StateItems(const std::shared_ptr<const FusedState>& state);

// Compares two job tickets in time independent of where they differ.
bool TicketsEqual(const std::string& a, const std::string& b);

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_RESULT_ITEM_H_
