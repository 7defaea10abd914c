// The meeting point, on a worker, of a shard's two calls: RunShard (the
// coordinator's: it computes) and ShardDataService.Transfer (the client's: it
// brings the shard's in-band tokens and takes its outputs, data.proto).
// RunShard registers a ShardTransfer on the TransferBoard; the client's
// stream finds it by job, rank and ticket. Tokens are decoded once, by the
// Transfer thread, into the TokenReceiver; outputs are handed over as
// tensors and chunked by the Transfer thread as it sends them.
//
// Either side may fail the transfer: the other side's waits return that
// status. Thread-safe; the receiver belongs to the Transfer thread
// until the upload ends, then to RunShard.
#ifndef LACT_WORKER_DATA_PLANE_SHARD_TRANSFER_H_
#define LACT_WORKER_DATA_PLANE_SHARD_TRANSFER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "lact/v1/data.pb.h"
#include "worker/data_plane/compute_line.h"
#include "worker/data_plane/context_spool.h"
#include "worker/data_plane/result_item.h"
#include "worker/data_plane/token_receiver.h"

namespace lact {

class ShardTransfer {
 public:
  using Item = ResultItem;

  ShardTransfer(std::string ticket, TokenReceiver receiver)
      : ticket_(std::move(ticket)), receiver_(std::move(receiver)) {}
  // Also hands each accepted context chunk, as it came (in the job's
  // dtype), to `spool` (context_spool.h). Before the transfer is
  // registered.
  void SetSpool(std::unique_ptr<ContextSpool> spool) { spool_ = std::move(spool); }
  // Admits every chunk through the shard's place in the worker's compute
  // line (compute_line.h): while the shard is staged, a chunk waits for
  // room under the staging cap. A failure closes the place. Before the
  // transfer is registered.
  void SetPlace(std::shared_ptr<ComputeLine::Place> place) { place_ = std::move(place); }

  // --- the Transfer side ---
  bool TicketMatches(const std::string& ticket) const;
  const std::string& ticket() const { return ticket_; }
  // Claims the shard for one stream, waiting up to `wait` for a stream
  // that has it to release it; FAILED_PRECONDITION if another still has it,
  // the transfer's failure if it failed. `end_stream` (called under the
  // transfer's lock, so it must not call back) ends the stream with the
  // transfer's failure when it fails, its blocking reads with it; Detach()
  // drops it before the stream ends. `arrived`: when the stream's first
  // message reached this worker, where the upload's time starts.
  absl::Status Attach(
      std::function<void(const absl::Status&)> end_stream, std::chrono::milliseconds wait,
      std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now());
  void Detach();
  // The attached stream ended (reset or broken) before it sent a chunk:
  // the shard is free for another stream with the same ticket, and waits
  // for it as for the first (the upload idle limit starts again). False,
  // releasing nothing, once a chunk arrived or the transfer failed.
  bool Release();
  // Decodes a chunk (after the place admits it); a bad chunk fails the
  // transfer. `owner`, when given,
  // keeps `data` alive, so the spool writes it from where it lies.
  absl::Status Accept(int set, int64_t offset, const std::vector<absl::string_view>& data,
                      int64_t bytes, std::shared_ptr<const void> owner = nullptr);
  absl::Status Accept(const v1::TokenChunk& chunk) {
    return Accept(chunk.set(), chunk.offset(), {absl::string_view(chunk.data())},
                  static_cast<int64_t>(chunk.data().size()));
  }
  // The client closed its side: checks every set is complete.
  absl::Status EndUpload();
  // The upload failed (the stream's thread, which owns the receiver until
  // the upload ends): the tokens received so far are freed now.
  void DropUpload();
  // The next item to send; nullopt once RunShard has published everything
  // and it was taken; the failure if the transfer failed.
  absl::StatusOr<std::optional<Item>> NextItem();
  // Everything was sent.
  void DownloadDone();

  // --- the RunShard side ---
  // Blocks until the upload ended: OK, or why not. A stream that has not
  // attached, or sent nothing, for `idle` fails it (DEADLINE_EXCEEDED).
  absl::Status AwaitUpload(std::chrono::milliseconds idle);
  TokenReceiver& receiver() { return receiver_; }  // after AwaitUpload OK
  // From the first byte of the stream that brought the tokens to the last
  // chunk: after AwaitUpload OK.
  double upload_seconds() const;
  // The idle limit counts from now: the shard's turn came after a wait in
  // which its stream may have been held back.
  void Touch();
  void Publish(Item item);
  void EndPublishing();
  // Blocks until the stream sent every item (OK), the transfer failed, or
  // no stream attached for `idle` after the last item was published
  // (DEADLINE_EXCEEDED: the client is not there to take them).
  absl::Status AwaitDownload(std::chrono::milliseconds idle);
  int64_t context_bytes() const { return receiver_.bytes_received(); }
  // Every context row is in the spool (false until the spool's thread has
  // written them, some time after the upload).
  bool spooled() const { return spool_ != nullptr && spool_->Complete(); }

  // Fails the transfer with `status` (the first failure wins): Fail from
  // the Transfer side, Abort from RunShard (it also cancels the stream, so
  // a client that stalls mid-upload does not hold the Transfer thread).
  void Fail(absl::Status status);
  void Abort(absl::Status status);
  // The shard's RunShard call ended (the coordinator cancelled the job):
  // Abort with CANCELLED, worded by how far the transfer got.
  void Cancel();
  absl::Status failure() const;

 private:
  enum class Stage { kWaiting, kUploading, kUploaded, kDownloaded };
  void AbortLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `stage` or a failure. While `idle_applies` holds, the
  // transfer fails with DEADLINE_EXCEEDED `idle_error` once `idle` has
  // passed since the last activity; the wait wakes only for a change or
  // at that deadline.
  absl::Status AwaitStage(Stage stage, std::chrono::milliseconds idle,
                          const std::function<bool()>& idle_applies,
                          const std::function<std::string()>& idle_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string ticket_;
  TokenReceiver receiver_;
  std::unique_ptr<ContextSpool> spool_;        // set before the transfer is shared
  std::shared_ptr<ComputeLine::Place> place_;  // likewise; null: admitted at once
  mutable absl::Mutex mu_;
  Stage stage_ ABSL_GUARDED_BY(mu_) = Stage::kWaiting;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const absl::Status&)> end_stream_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_activity_ ABSL_GUARDED_BY(mu_) =
      std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point upload_began_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point upload_ended_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  bool publishing_done_ ABSL_GUARDED_BY(mu_) = false;
};

// The shards of this worker waiting for, or in, their Transfer streams, by
// job, rank and ticket: a job that runs again has new tickets, and its new
// shard may start here before the dead attempt's shard of the same rank has
// ended. The last kRememberedFailures shards that failed (a cancel, a bad
// chunk, a broken peer) are remembered by ticket, so a stream that comes
// after its shard failed is told why, as one that came before was.
// Thread-safe.
class TransferBoard {
 public:
  static constexpr size_t kRememberedFailures = 1024;

  // Registers for the life of the returned handle's RunShard call.
  void Register(const std::string& job_id, int rank, std::shared_ptr<ShardTransfer> transfer);
  // Removes `transfer` only, never another attempt's shard of the same rank;
  // remembers its failure, if it failed.
  void Unregister(const std::string& job_id, int rank, const ShardTransfer* transfer);
  // At most this many Find calls wait at once for a shard not registered
  // yet; more are RESOURCE_EXHAUSTED at once (made-up tickets hold nothing).
  static constexpr int kMaxWaiting = 64;

  // The transfer of `job_id` rank `rank` whose ticket is `ticket`, waiting
  // up to `wait` for RunShard to register it (the client may be faster
  // than the coordinator, also when a job runs again). A shard of that
  // ticket that already failed: its failure, at once. Then
  // PERMISSION_DENIED if a shard of that job and rank was registered with
  // another ticket, NOT_FOUND if none was.
  absl::StatusOr<std::shared_ptr<ShardTransfer>> Find(const std::string& job_id, int rank,
                                                      const std::string& ticket,
                                                      std::chrono::milliseconds wait);

 private:
  using Key = std::pair<std::string, int>;
  // The registered transfer of `key` whose ticket is `ticket`, or null;
  // `*other_ticket` is set when one with another ticket is there.
  std::shared_ptr<ShardTransfer> MatchLocked(const Key& key, const std::string& ticket,
                                             bool* other_ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The failure of the shard of `key` and `ticket` that ended, or OK.
  absl::Status FailureLocked(const Key& key, const std::string& ticket) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Failed {
    Key key;
    std::string ticket;
    absl::Status failure;
  };
  absl::Mutex mu_;
  std::map<Key, std::vector<std::shared_ptr<ShardTransfer>>> transfers_ ABSL_GUARDED_BY(mu_);
  std::deque<Failed> failed_ ABSL_GUARDED_BY(mu_);  // newest last
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_SHARD_TRANSFER_H_
