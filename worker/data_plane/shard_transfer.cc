#include "worker/data_plane/shard_transfer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace lact {
bool ShardTransfer::TicketMatches(const std::string& ticket) const {
  return TicketsEqual(ticket, ticket_);
}

absl::Status ShardTransfer::Attach(std::function<void(const absl::Status&)> end_stream,
                                   std::chrono::milliseconds wait,
                                   std::chrono::steady_clock::time_point arrived) {
  absl::MutexLock lock(&mu_);
  // A stream that ended may not have released the shard yet: it does so as
  // soon as its thread sees the end.
  const auto free = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !attached_ || !failure_.ok(); };
  mu_.AwaitWithTimeout(absl::Condition(&free), absl::FromChrono(wait));
  if (!failure_.ok()) return failure_;
  if (attached_) {
    return absl::FailedPreconditionError(
        absl::StrCat("another Transfer stream already serves this shard (still after ",
                     wait.count(), " ms); one stream per shard at a time"));
  }
  attached_ = true;
  end_stream_ = std::move(end_stream);
  stage_ = Stage::kUploading;
  last_activity_ = std::chrono::steady_clock::now();
  upload_began_ = arrived;
  return absl::OkStatus();
}

absl::Status ShardTransfer::Accept(int set, int64_t offset,
                                   const std::vector<absl::string_view>& data, int64_t bytes,
                                   std::shared_ptr<const void> owner) {
  if (place_ != nullptr) {
    if (absl::Status s = place_->Admit(receiver_.DecodedBytes(bytes)); !s.ok()) {
      absl::MutexLock lock(&mu_);
      return failure_.ok() ? s : failure_;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    last_activity_ = std::chrono::steady_clock::now();
  }
  absl::Status s = receiver_.Accept(set, offset, data, bytes);
  if (!s.ok()) {
    Fail(s);
    return s;
  }
  if (set == 0 && spool_ != nullptr) spool_->Add(offset, data, std::move(owner));
  return s;
}

absl::Status ShardTransfer::EndUpload() {
  absl::Status s = receiver_.CheckComplete();
  if (!s.ok()) {
    Fail(s);
    return s;
  }
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  stage_ = Stage::kUploaded;
  upload_ended_ = std::chrono::steady_clock::now();
  if (spool_ != nullptr) spool_->UploadEnded();
  return absl::OkStatus();
}

void ShardTransfer::DropUpload() {
  {
    absl::MutexLock lock(&mu_);
    if (stage_ == Stage::kUploaded || stage_ == Stage::kDownloaded) return;
  }
  receiver_.Clear();
}

absl::StatusOr<std::optional<ShardTransfer::Item>> ShardTransfer::NextItem() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ShardTransfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
        return !t->failure_.ok() || !t->items_.empty() || t->publishing_done_;
      },
      this));
  if (!failure_.ok()) return failure_;
  if (items_.empty()) return std::optional<Item>();
  Item item = std::move(items_.front());
  items_.pop_front();
  return std::optional<Item>(std::move(item));
}

void ShardTransfer::DownloadDone() {
  absl::MutexLock lock(&mu_);
  stage_ = Stage::kDownloaded;
}

absl::Status ShardTransfer::AwaitStage(Stage stage, std::chrono::milliseconds idle,
                                       const std::function<bool()>& idle_applies,
                                       const std::function<std::string()>& idle_error) {
  auto reached = [this, stage]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failure_.ok() || stage_ == stage;
  };
  while (!reached()) {
    if (!idle_applies()) {
      // Until something changes (an attach makes the idle rule moot).
      const bool attached = attached_;
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return reached() || attached_ != attached;
      };
      mu_.Await(absl::Condition(&changed));
      continue;
    }
    const auto left = last_activity_ + idle - std::chrono::steady_clock::now();
    if (mu_.AwaitWithTimeout(absl::Condition(&reached), absl::FromChrono(left))) break;
    if (idle_applies() && std::chrono::steady_clock::now() - last_activity_ >= idle) {
      AbortLocked(absl::DeadlineExceededError(idle_error()));
    }
  }
  return failure_;
}

absl::Status ShardTransfer::AwaitUpload(std::chrono::milliseconds idle) {
  absl::MutexLock lock(&mu_);
  return AwaitStage(
      Stage::kUploaded, idle, [] { return true; },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return absl::StrCat(
            attached_ ? "no token chunk for " : "no Transfer stream from the client for ",
            idle.count(), " ms during the upload");
      });
}

double ShardTransfer::upload_seconds() const {
  absl::MutexLock lock(&mu_);
  return std::chrono::duration<double>(upload_ended_ - upload_began_).count();
}

void ShardTransfer::Touch() {
  absl::MutexLock lock(&mu_);
  last_activity_ = std::chrono::steady_clock::now();
}

void ShardTransfer::Publish(Item item) {
  absl::MutexLock lock(&mu_);
  items_.push_back(std::move(item));
}

void ShardTransfer::EndPublishing() {
  absl::MutexLock lock(&mu_);
  publishing_done_ = true;
  last_activity_ = std::chrono::steady_clock::now();
}

absl::Status ShardTransfer::AwaitDownload(std::chrono::milliseconds idle) {
  absl::MutexLock lock(&mu_);
  return AwaitStage(
      Stage::kDownloaded, idle, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !attached_; },
      [&] {
        return absl::StrCat("no Transfer stream from the client for ", idle.count(),
                            " ms to take the results");
      });
}

void ShardTransfer::Detach() {
  absl::MutexLock lock(&mu_);
  end_stream_ = nullptr;
}

bool ShardTransfer::Release() {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok() || stage_ != Stage::kUploading || receiver_.bytes_received() > 0) return false;
  attached_ = false;
  end_stream_ = nullptr;
  stage_ = Stage::kWaiting;
  last_activity_ = std::chrono::steady_clock::now();
  return true;
}

void ShardTransfer::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  FailLocked(std::move(status));
}

void ShardTransfer::FailLocked(absl::Status status) {
  if (!failure_.ok()) return;
  failure_ = std::move(status);
  if (place_ != nullptr) place_->Close();  // a staged chunk's wait ends
}

void ShardTransfer::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  AbortLocked(std::move(status));
}

void ShardTransfer::Cancel() {
  absl::MutexLock lock(&mu_);
  // Waiting for the stream is part of the upload: a cancel then reads the
  // same whether the stream came before it or comes after.
  const bool uploading = stage_ == Stage::kWaiting || stage_ == Stage::kUploading;
  const char* when = publishing_done_ || !items_.empty() ? " while its outputs were sent"
                     : uploading                         ? " during the upload"
                     : place_ != nullptr && !place_->had_turn()
                         ? " while it waited for the job before it on its worker"
                         : " while it computed";
  AbortLocked(absl::CancelledError(absl::StrCat("the job was cancelled", when)));
}

void ShardTransfer::AbortLocked(absl::Status status) {
  if (!failure_.ok()) return;
  FailLocked(std::move(status));
  if (end_stream_) end_stream_(failure_);
}

absl::Status ShardTransfer::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void TransferBoard::Register(const std::string& job_id, int rank,
                             std::shared_ptr<ShardTransfer> transfer) {
  absl::MutexLock lock(&mu_);
  transfers_[{job_id, rank}].push_back(std::move(transfer));
}

void TransferBoard::Unregister(const std::string& job_id, int rank, const ShardTransfer* transfer) {
  absl::MutexLock lock(&mu_);
  auto it = transfers_.find({job_id, rank});
  if (it == transfers_.end()) return;
  std::vector<std::shared_ptr<ShardTransfer>>& same_rank = it->second;
  for (const std::shared_ptr<ShardTransfer>& t : same_rank) {
    if (t.get() != transfer) continue;
    if (absl::Status failure = t->failure(); !failure.ok()) {
      failed_.push_back({it->first, t->ticket(), std::move(failure)});
      if (failed_.size() > kRememberedFailures) failed_.pop_front();
    }
  }
  same_rank.erase(std::remove_if(same_rank.begin(), same_rank.end(),
                                 [transfer](const std::shared_ptr<ShardTransfer>& t) {
                                   return t.get() == transfer;
                                 }),
                  same_rank.end());
  if (same_rank.empty()) transfers_.erase(it);
}

absl::Status TransferBoard::FailureLocked(const Key& key, const std::string& ticket) const {
  for (auto it = failed_.rbegin(); it != failed_.rend(); ++it) {
    if (it->key == key && TicketsEqual(ticket, it->ticket)) return it->failure;
  }
  return absl::OkStatus();
}

std::shared_ptr<ShardTransfer> TransferBoard::MatchLocked(const Key& key, const std::string& ticket,
                                                          bool* other_ticket) {
  auto it = transfers_.find(key);
  if (it == transfers_.end()) return nullptr;
  for (const std::shared_ptr<ShardTransfer>& t : it->second) {
    if (t->TicketMatches(ticket)) return t;
  }
  *other_ticket = true;
  return nullptr;
}

absl::StatusOr<std::shared_ptr<ShardTransfer>> TransferBoard::Find(const std::string& job_id,
                                                                   int rank,
                                                                   const std::string& ticket,
                                                                   std::chrono::milliseconds wait) {
  const Key key(job_id, rank);
  absl::MutexLock lock(&mu_);
  bool other_ticket = false;
  std::shared_ptr<ShardTransfer> found = MatchLocked(key, ticket, &other_ticket);
  if (found == nullptr) {
    if (absl::Status failed = FailureLocked(key, ticket); !failed.ok()) return failed;
    if (waiting_ >= kMaxWaiting) {
      return absl::ResourceExhaustedError(
          absl::StrCat(kMaxWaiting,
                       " Transfer streams already wait here for shards that have not started; "
                       "open a job's Transfer streams after its JobAccepted"));
    }
    ++waiting_;
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      found = MatchLocked(key, ticket, &other_ticket);
      return found != nullptr;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::FromChrono(wait));
    --waiting_;
  }
  if (found != nullptr) return found;
  if (absl::Status failed = FailureLocked(key, ticket); !failed.ok()) return failed;
  if (other_ticket) {
    return absl::PermissionDeniedError(absl::StrCat("wrong ticket for job '", job_id, "'"));
  }
  return absl::NotFoundError(absl::StrCat("this worker runs no shard ", rank, " of job '", job_id,
                                          "' that waits for a Transfer stream"));
}

}  // namespace lact
