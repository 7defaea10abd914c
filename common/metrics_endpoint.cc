#include "common/metrics_endpoint.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lact {
namespace {

// libmicrohttpd's request callback: every request is answered on its first
// call, before any body is read.
MHD_Result OnRequest(void* self, MHD_Connection* connection, const char* url, const char* method,
                     const char*, const char*, size_t*, void**) {
  return MetricsEndpoint::Handle(self, connection, url, method) ? MHD_YES : MHD_NO;
}

// The address to listen on: `host` (a numeric address or a name) and `port`.
absl::StatusOr<sockaddr_storage> ListenAddress(const std::string& host, int port,
                                               socklen_t* length) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(host.c_str(), nullptr, &hints, &found); err != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics host '", host, "': ", gai_strerror(err)));
  }
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  freeaddrinfo(found);
  if (address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(&address)->sin_port = htons(static_cast<uint16_t>(port));
  }
  return address;
}

}  // namespace

bool MetricsEndpoint::Handle(void* self, MHD_Connection* connection, const char* url,
                             const char* method) {
  std::string body;
  const char* type = "text/plain";
  const int status = static_cast<const MetricsEndpoint*>(self)->Answer(method, url, &body, &type);
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return false;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(response, "Allow", "GET, HEAD");
  const MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(status), response);
  MHD_destroy_response(response);
  return queued == MHD_YES;
}

int MetricsEndpoint::Answer(const std::string& method, const std::string& url, std::string* body,
                            const char** type) const {
  if (method != "GET" && method != "HEAD") {
    *body = "only GET and HEAD are served here\n";
    return MHD_HTTP_METHOD_NOT_ALLOWED;
  }
  if (url == "/metrics") {
    if (refresh_) refresh_();
    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, registry_->Collect());
    *body = text.str();
    *type = "text/plain; version=0.0.4; charset=utf-8";
    return MHD_HTTP_OK;
  }
  if (url == "/livez") {
    *body = "live\n";
    return MHD_HTTP_OK;
  }
  if (url == "/readyz") {
    const bool serving = !ready_ || ready_();
    *body = serving ? "serving\n" : "not serving\n";
    return serving ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
  }
  *body = "not found: /metrics, /livez and /readyz are served here\n";
  return MHD_HTTP_NOT_FOUND;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
    std::function<void()> refresh, std::function<bool()> ready) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->registry_ = std::move(registry);
  endpoint->refresh_ = std::move(refresh);
  endpoint->ready_ = std::move(ready);
  socklen_t length = 0;
  absl::StatusOr<sockaddr_storage> address = ListenAddress(host, port, &length);
  if (!address.ok()) return address.status();
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (address->ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  endpoint->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &OnRequest, endpoint.get(),
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<const sockaddr*>(&*address),
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      kMaxConnectionsPerIp, MHD_OPTION_CONNECTION_TIMEOUT, kIdleSeconds,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory, MHD_OPTION_END);
  const MHD_DaemonInfo* info =
      endpoint->daemon_ == nullptr
          ? nullptr
          : MHD_get_daemon_info(endpoint->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  if (info == nullptr || info->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, " for metrics (--metrics-port)"));
  }
  endpoint->port_ = info->port;
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
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace lact
