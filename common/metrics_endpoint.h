// A Prometheus scrape endpoint on a port of its own: GET /metrics answers
// the text exposition format (0.0.4) of a prometheus-cpp registry, served
// by cpp-httplib from a thread of its own. Before each scrape `refresh`
// runs (it sets the gauges that are read from live state: jobs by status,
// workers, retained bytes). The same port answers HTTP probes in
// plaintext (kubelet's gRPC probes cannot speak TLS, which lact's gRPC
// ports need off loopback): GET /livez is 200 while the process serves
// HTTP, GET /readyz 200 while `ready()` holds and 503 otherwise (the
// process mirrors its gRPC health service there: not ready until
// registered, nor while draining). Any other path is 404. Thread-safe; the
// destructor stops the server and joins its thread.
#ifndef LACT_COMMON_METRICS_ENDPOINT_H_
#define LACT_COMMON_METRICS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace httplib {
class Server;
}
namespace prometheus {
class Registry;
}

namespace lact {

class MetricsEndpoint {
 public:
  // Listens on host:port (0: a free port).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
      std::function<void()> refresh, std::function<bool()> ready);
  // For a server's --metrics-port (in `flags`): null when it is not given;
  // else Start, and prints "PROGRAM metrics on HOST:PORT" to stdout.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartIfAsked(
      const Flags& flags, const std::string& host, std::shared_ptr<prometheus::Registry> registry,
      std::function<void()> refresh, std::function<bool()> ready, const char* program);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;

  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace lact

#endif  // LACT_COMMON_METRICS_ENDPOINT_H_
