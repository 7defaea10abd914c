// A Prometheus scrape endpoint on a port of its own: GET /metrics answers
// the text exposition format (0.0.4) of a prometheus-cpp registry, served
// by GNU libmicrohttpd from one event-driven thread of its own, so a slow
// or idle client holds a connection slot, never a thread: at most
// kMaxConnections connections (kMaxConnectionsPerIp from one address), each
// closed after kIdleSeconds without a byte and limited to
// kConnectionMemory bytes of request; only GET and HEAD are answered, at
// once, and a request body is never read (405 for other methods). The port
// is unauthenticated: it tells what the metrics tell. Before each scrape `refresh`
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

#include "absl/status/statusor.h"
#include "common/flags.h"

struct MHD_Connection;
struct MHD_Daemon;
namespace prometheus {
class Registry;
}

namespace lact {

class MetricsEndpoint {
 public:
  static constexpr unsigned kMaxConnections = 256;
  static constexpr unsigned kMaxConnectionsPerIp = 64;
  static constexpr unsigned kIdleSeconds = 5;
  static constexpr size_t kConnectionMemory = 16 << 10;

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

  // Answers a request of libmicrohttpd's on `self`'s behalf; false if the
  // response could not be queued (the connection is then closed).
  static bool Handle(void* self, MHD_Connection* connection, const char* url, const char* method);

 private:
  MetricsEndpoint() = default;
  // The response to `method` `url`: its status, body and content type.
  int Answer(const std::string& method, const std::string& url, std::string* body,
             const char** type) const;

  std::shared_ptr<prometheus::Registry> registry_;
  std::function<void()> refresh_;
  std::function<bool()> ready_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace lact

#endif  // LACT_COMMON_METRICS_ENDPOINT_H_
