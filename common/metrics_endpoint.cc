#include "common/metrics_endpoint.h"

#include <httplib.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cstdio>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lact {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
    std::function<void()> refresh, std::function<bool()> ready) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->server_ = std::make_unique<httplib::Server>();
  endpoint->server_->Get("/metrics", [registry, refresh = std::move(refresh)](
                                         const httplib::Request&, httplib::Response& response) {
    if (refresh) refresh();
    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, registry->Collect());
    response.set_content(text.str(), "text/plain; version=0.0.4; charset=utf-8");
  });
  endpoint->server_->Get("/livez", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("live\n", "text/plain");
  });
  endpoint->server_->Get(
      "/readyz", [ready = std::move(ready)](const httplib::Request&, httplib::Response& response) {
        const bool serving = !ready || ready();
        response.status = serving ? 200 : 503;
        response.set_content(serving ? "serving\n" : "not serving\n", "text/plain");
      });
  if (port == 0) {
    endpoint->port_ = endpoint->server_->bind_to_any_port(host);
  } else if (endpoint->server_->bind_to_port(host, port)) {
    endpoint->port_ = port;
  }
  if (endpoint->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, " for metrics (--metrics-port)"));
  }
  httplib::Server* server = endpoint->server_.get();
  endpoint->thread_ = std::thread([server] { server->listen_after_bind(); });
  return endpoint;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::StartIfAsked(
    const Flags& flags, const std::string& host, std::shared_ptr<prometheus::Registry> registry,
    std::function<void()> refresh, std::function<bool()> ready, const char* program) {
  absl::StatusOr<std::optional<int64_t>> port = flags.OptionalInt("metrics-port", 0, 65535);
  if (!port.ok()) return port.status();
  if (!*port) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint = Start(
      host, static_cast<int>(**port), std::move(registry), std::move(refresh), std::move(ready));
  if (endpoint.ok()) {
    std::printf("%s metrics on %s:%d\n", program, host.c_str(), (*endpoint)->port());
    std::fflush(stdout);
  }
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace lact
