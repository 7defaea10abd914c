#include "worker/kv_store_client.h"

#include <grpcpp/grpcpp.h>

#include <stdexcept>

#include "worker/collective/rendezvous_timeout.h"

namespace lact {
namespace {

// The coordinator that keeps the rendezvous went away (a restart): its
// keys with it, so the group cannot meet; the job runs again.
RendezvousUnavailable Unreachable(const grpc::Status& s) {
  return RendezvousUnavailable("the rendezvous store (the coordinator) cannot be reached: " +
                               s.error_message());
}

constexpr char kCancelled[] = "the shard was cancelled while its group met";

}  // namespace

void KvStoreClient::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (current_ != nullptr) current_->TryCancel();
}

grpc::Status KvStoreClient::Call(grpc::ClientContext& ctx,
                                 const std::function<grpc::Status()>& call) {
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) throw std::runtime_error(kCancelled);
    current_ = &ctx;
  }
  grpc::Status s = call();
  absl::MutexLock lock(&mu_);
  current_ = nullptr;
  if (cancelled_) throw std::runtime_error(kCancelled);
  return s;
}

void KvStoreClient::set(const std::string& key, const std::vector<char>& data) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
  v1::KvSetRequest request;
  request.set_key(key);
  request.set_value(std::string(data.begin(), data.end()));
  v1::KvSetResponse response;
  grpc::Status s = Call(ctx, [&] { return control_->KvSet(&ctx, request, &response); });
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) throw Unreachable(s);
  if (!s.ok())
    throw std::runtime_error("rendezvous set '" + key + "' failed: " + s.error_message());
}

std::vector<std::string> KvStoreClient::Get(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(5));
  v1::KvGetRequest request;
  for (const std::string& k : keys) request.add_keys(k);
  request.set_timeout_ms(static_cast<int32_t>(timeout.count()));
  v1::KvGetResponse response;
  grpc::Status s = Call(ctx, [&] { return control_->KvGet(&ctx, request, &response); });
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    throw RendezvousTimeout("rendezvous: the group's other ranks did not come in time: " +
                            s.error_message());
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) throw Unreachable(s);
  if (!s.ok()) throw std::runtime_error("rendezvous get failed: " + s.error_message());
  return {response.values().begin(), response.values().end()};
}

std::vector<char> KvStoreClient::get(const std::string& key) {
  const std::string v = Get({key}, timeout_).at(0);
  return {v.begin(), v.end()};
}

void KvStoreClient::wait(const std::vector<std::string>& keys,
                         const std::chrono::milliseconds& timeout) {
  Get(keys, timeout);
}

}  // namespace lact
