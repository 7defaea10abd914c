// Watches a server call from a thread of its own: when the client cancels
// it, disconnects or its deadline passes, calls `on_end` once. Stops (and
// joins) when destroyed, so it must not outlive the call's handler.
#ifndef LACT_SERVER_CALL_WATCHER_H_
#define LACT_SERVER_CALL_WATCHER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace lact::server {

class CallWatcher {
 public:
  CallWatcher(grpc::ServerContext* context, std::function<void()> on_end)
      : thread_([this, context, on_end = std::move(on_end)] {
          while (!done_) {
            if (context->IsCancelled()) {
              on_end();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  CallWatcher(const CallWatcher&) = delete;
  CallWatcher& operator=(const CallWatcher&) = delete;
  ~CallWatcher() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_CALL_WATCHER_H_
