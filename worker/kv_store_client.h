// A gloo::rendezvous::Store over the coordinator's Control KV (gRPC), so the
// ranks of a job's group find each other through the coordinator. Failures
// throw, as Gloo expects of a Store: RendezvousTimeout when the keys waited
// for do not come in time; the collectives turn them into statuses.
#ifndef LACT_WORKER_KV_STORE_CLIENT_H_
#define LACT_WORKER_KV_STORE_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

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

 private:
  std::vector<std::string> Get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout);

  std::shared_ptr<v1::ControlService::Stub> control_;
  std::chrono::milliseconds timeout_;
};

}  // namespace lact

#endif  // LACT_WORKER_KV_STORE_CLIENT_H_
