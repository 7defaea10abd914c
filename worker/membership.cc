#include "worker/membership.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace lact {

absl::StatusOr<std::string> Membership::Join() {
  absl::StatusOr<std::string> id = Register();
  if (!id.ok()) return id;
  {
    absl::MutexLock lock(&mu_);
    id_ = *id;
  }
  shards_->OnHeld([this] { Wake(); });
  thread_ = std::thread([this] { Heartbeats(); });
  return id;
}

void Membership::Leave() {
  if (stopping_.exchange(true)) return;
  shards_->OnHeld(nullptr);
  Wake();  // a heartbeat thread between beats ends at once
  if (thread_.joinable()) thread_.join();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::DeregisterRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (id_.empty()) return;
    request.set_worker_id(id_);
  }
  v1::DeregisterResponse response;
  control_->Deregister(&ctx, request, &response).IgnoreError();
}

absl::StatusOr<std::string> Membership::Register() {
  grpc::Status last;
  for (int attempt = 0; attempt < 100; ++attempt) {  // ~30 s for the coordinator to come up
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::RegisterResponse response;
    last = control_->Register(&ctx, request_, &response);
    if (last.ok()) {
      interval_ms_ = response.heartbeat_interval_ms();
      return response.worker_id();
    }
    if (last.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        last.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      break;  // no retry will fix a wrong secret or request
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot register with the coordinator: ", last.error_message()));
}

void Membership::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void Membership::Heartbeats() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&wake_), absl::Milliseconds(interval_ms_.load()));
      wake_ = false;
    }
    if (stopping_) return;
    shards_->DropExpired();
    HeartbeatOnce();
  }
}

void Membership::HeartbeatOnce() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(interval_ms_));
  v1::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(id_);
  }
  for (DroppedJob& dropped : results_->TakeDropped()) unreported_.push_back(std::move(dropped));
  for (const DroppedJob& dropped : unreported_) {
    v1::DroppedResults* d = request.add_dropped();
    d->set_job_id(dropped.job_id);
    d->set_state(dropped.state);
    d->set_why(dropped.why);
  }
  for (v1::HeldShard& held : shards_->Held()) *request.add_held_shards() = std::move(held);
  v1::HeartbeatResponse response;
  const bool heard = control_->Heartbeat(&ctx, request, &response).ok();
  if (heard) unreported_.clear();
  for (const v1::HeldShard& drop : response.drop_shards()) {
    shards_->Drop({drop.job_id(), drop.attempt(), drop.rank()},
                  "its coordinator let it go (the job ended, was cancelled, or runs again "
                  "elsewhere)");
  }
  if (heard && !response.known() && !stopping_) {
    absl::StatusOr<std::string> again = Register();
    absl::MutexLock lock(&mu_);
    if (again.ok()) id_ = *again;
  }
}

}  // namespace lact
