// A gloo::rendezvous::Store over the coordinator's Control KV (gRPC), so the
// ranks of a job's group find each other through the coordinator. Failures
// throw, as Gloo expects of a Store: RendezvousTimeout when the keys waited
// for do not come in time; the collectives turn them into statuses. Cancel
// ends a wait in progress, and every later call, at once (the shard was
// cancelled while its group met).
#ifndef LACT_WORKER_KV_STORE_CLIENT_H_
#define LACT_WORKER_KV_STORE_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gloo/rendezvous/store.h"
#include "lact/v1/control.grpc.pb.h"

namespace lact {

class KvStoreClient final : public gloo::rendezvous::Store {
 public:
  KvStoreClient(std::shared_ptr<v1::ControlService::Stub> control,
                std::chrono::milliseconds timeout)
      : control_(std::move(control)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // Thread-safe: from the shard's cancel.
  void Cancel();

 private:
  // Runs `call` on a context a Cancel reaches; throws once cancelled.
  grpc::Status Call(grpc::ClientContext& ctx, const std::function<grpc::Status()>& call);

  std::vector<std::string> Get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout);

  std::shared_ptr<v1::ControlService::Stub> control_;
  std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  grpc::ClientContext* current_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lact

#endif  // LACT_WORKER_KV_STORE_CLIENT_H_
