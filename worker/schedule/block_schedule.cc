#include "worker/schedule/block_schedule.h"

#include <algorithm>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "common/status_macros.h"
#include "worker/schedule/bimamba_schedule.h"
#include "worker/schedule/tiles.h"

namespace lact {
namespace {

// The LaCT chunks of a sequence and the shard's rows in each.
class LactChunks {
 public:
  LactChunks(const ModelConfig& c, const ShardContext& shard, int64_t rows)
      : size_(shard.context() && c.ttt.chunk_tokens > 0 ? c.ttt.chunk_tokens : shard.total),
        total_(shard.total),
        begin_(shard.begin),
        rows_(rows) {}

  int64_t count() const { return (total_ + size_ - 1) / size_; }

  // Chunk k's tokens in this shard, as local rows [lo, hi) (empty if none).
  std::pair<int64_t, int64_t> LocalRows(int64_t k) const {
    const int64_t lo = std::clamp(k * size_ - begin_, int64_t{0}, rows_);
    const int64_t hi = std::clamp((k + 1) * size_ - begin_, int64_t{0}, rows_);
    return {lo, hi};
  }

 private:
  int64_t size_, total_, begin_, rows_;
};

absl::Status AccumulateGrads(const LayerWeights& w, const LactChunks& chunks, int64_t k,
                             const ShardContext& shard, BackendOps& ops) {
  LACT_RETURN_IF_ERROR(ops.ZeroGrads());
  const auto [lo, hi] = chunks.LocalRows(k);
  return ForEachTile(lo, hi, ops.tile(), shard,
                     [&](int64_t first, int64_t n) { return ops.AccumulateGrads(w, first, n); });
}

absl::Status ApplyFastWeights(const LayerWeights& w, const LactChunks& chunks, int64_t k,
                              const ShardContext& shard, BackendOps& ops) {
  const auto [lo, hi] = chunks.LocalRows(k);
  return ForEachTile(lo, hi, ops.tile(), shard,
                     [&](int64_t first, int64_t n) { return ops.ApplyFastWeights(w, first, n); });
}

}  // namespace

absl::Status RunBlock(const ModelConfig& c, const LayerWeights& w, const ShardContext& shard,
                      BackendOps& ops, const LayerState* kept, LayerState* out,
                      const TileStep& after_tile) {
  LACT_RETURN_IF_ERROR(ops.BeginBlock(w));
  LACT_RETURN_IF_ERROR(ops.LoadFastWeights(w, kept));
  const LactChunks chunks(c, shard, ops.tokens());
  // Chunk 0's gradients first, so that their all-reduce overlaps the scans.
  bool reducing = false;
  if (shard.context()) {
    if (shard.Cancelled()) return CancelledStatus();
    LACT_RETURN_IF_ERROR(AccumulateGrads(w, chunks, 0, shard, ops));
    if (shard.distributed()) {
      LACT_RETURN_IF_ERROR(ops.StartGradAllReduce());
      reducing = true;
    }
  }
  const absl::Status scans = RunBiMamba(c, w, shard, ops, kept, out);
  if (reducing) {
    const absl::Status reduced = ops.FinishGradAllReduce();
    LACT_RETURN_IF_ERROR(scans);
    LACT_RETURN_IF_ERROR(reduced);
  }
  LACT_RETURN_IF_ERROR(scans);
  if (shard.context()) LACT_RETURN_IF_ERROR(ops.UpdateFastWeights(w));
  LACT_RETURN_IF_ERROR(ApplyFastWeights(w, chunks, 0, shard, ops));
  for (int64_t k = 1; k < chunks.count(); ++k) {
    // Every rank looks, those without rows in chunk k too: none enters the
    // all-reduce of a job that was cancelled.
    if (shard.Cancelled()) return CancelledStatus();
    LACT_RETURN_IF_ERROR(AccumulateGrads(w, chunks, k, shard, ops));
    if (shard.distributed()) {
      LACT_RETURN_IF_ERROR(ops.StartGradAllReduce());
      LACT_RETURN_IF_ERROR(ops.FinishGradAllReduce());  // nothing to overlap with
    }
    LACT_RETURN_IF_ERROR(ops.UpdateFastWeights(w));
    LACT_RETURN_IF_ERROR(ApplyFastWeights(w, chunks, k, shard, ops));
  }
  LACT_RETURN_IF_ERROR(
      ForEachTile(0, ops.tokens(), ops.tile(), shard, [&](int64_t first, int64_t n) {
        LACT_RETURN_IF_ERROR(ops.ResidualMlp(w, first, n));
        return after_tile ? after_tile(first, n) : absl::OkStatus();
      }));
  if (shard.context()) LACT_RETURN_IF_ERROR(ops.StoreFastWeights(out));
  LACT_RETURN_IF_ERROR(ops.Sync());
  return shard.Cancelled() ? CancelledStatus() : absl::OkStatus();
}

absl::StatusOr<Tensor> RunModel(const Model& model, const ModelConfig& c, const ShardContext& shard,
                                Tensor tokens, BackendOps& ops, const FusedState* kept,
                                FusedState* out,
                                const std::function<void(int, int)>& on_layer_done) {
  const int64_t width = c.output_width();
  LACT_RETURN_IF_ERROR(ops.LoadTokens(std::move(tokens)));
  // The outputs: in rows the backend frees as the last block goes, or in a
  // buffer zero-filled in huge pages on a thread of its own while the
  // layers run (its first touches are then off the last layer's path).
  std::shared_ptr<Tensor> outputs = ops.OutputBuffer(width);
  std::future<Tensor> fresh;
  if (outputs == nullptr) {
    fresh = std::async(std::launch::async, [rows = ops.tokens(), width] {
      return HugePageTensor({rows, width});
    });
  }
  // In the last block each tile's output rows are made once its MLP is done.
  const TileStep output_tile = [&](int64_t first, int64_t n) -> absl::Status {
    if (outputs == nullptr) outputs = std::make_shared<Tensor>(fresh.get());  // the first tile
    LACT_RETURN_IF_ERROR(ops.OutputRows(first, n, outputs->ptr() + first * width));
    return shard.output_rows ? shard.output_rows({outputs, first, n}) : absl::OkStatus();
  };
  for (int i = 0; i < c.n_layers; ++i) {
    const absl::Status layer =
        RunBlock(c, model.layer(i), shard, ops, kept ? &kept->layers[i] : nullptr,
                 out ? &out->layers[i] : nullptr, i + 1 == c.n_layers ? output_tile : TileStep());
    if (!layer.ok()) {
      return absl::Status(layer.code(),
                          absl::StrCat("layer ", i + 1, " of ", c.n_layers, ": ", layer.message()));
    }
    if (on_layer_done) on_layer_done(i + 1, c.n_layers);
  }
  if (shard.output_rows) return Tensor();
  if (outputs == nullptr) outputs = std::make_shared<Tensor>(fresh.get());
  return std::move(*outputs);
}

}  // namespace lact
