// The unauthenticated metrics and probe port under clients that do not play
// along: dozens of connections that send half a request header and go
// silent, and a POST announcing a 256 MiB body. The probes are still
// answered at once, the body is never read, and the silent connections are
// closed after the idle limit. Real sockets on 127.0.0.1.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics_endpoint.h"
#include "common/peak_rss.h"
#include "tests/metrics_scrape.h"

namespace lact::testing {
namespace {

using Clock = std::chrono::steady_clock;

// A connected socket to 127.0.0.1:port, or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// What the server sent on `fd` within `wait` ("" if nothing or closed).
std::string Receive(int fd, std::chrono::milliseconds wait) {
  timeval timeout{static_cast<time_t>(wait.count() / 1000),
                  static_cast<suseconds_t>(wait.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char buffer[512];
  const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

// Whether the server closed `fd` (recv reads end of file within `wait`).
bool ClosedByServer(int fd, std::chrono::milliseconds wait) {
  timeval timeout{static_cast<time_t>(wait.count() / 1000),
                  static_cast<suseconds_t>(wait.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char byte;
  return recv(fd, &byte, 1, 0) == 0;
}

TEST(ProbePort, SlowClientsAndBodiesNeverStarveTheProbes) {
  auto registry = std::make_shared<prometheus::Registry>();
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0, registry, nullptr, [] { return true; });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  ASSERT_EQ(HttpStatus(address, "/livez"), 200);
  const int64_t resident_before = ResidentBytes();

  // Six times the threads a thread-per-connection server of this size
  // would have, each holding half a header.
  std::vector<int> slow;
  for (int i = 0; i < 48; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    const std::string half = "GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    ASSERT_EQ(send(fd, half.data(), half.size(), MSG_NOSIGNAL), static_cast<ssize_t>(half.size()));
    slow.push_back(fd);
  }
  const int post = Connect(port);
  ASSERT_GE(post, 0);
  const std::string head = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 268435456\r\n\r\n";
  ASSERT_GT(send(post, head.data(), head.size(), MSG_NOSIGNAL), 0);
  const std::string body(1 << 20, 'x');
  for (int i = 0; i < 16; ++i) {
    if (send(post, body.data(), body.size(), MSG_NOSIGNAL | MSG_DONTWAIT) <= 0) break;
  }

  const Clock::time_point asked = Clock::now();
  EXPECT_EQ(HttpStatus(address, "/livez"), 200);
  EXPECT_EQ(HttpStatus(address, "/readyz"), 200);
  EXPECT_LT(Clock::now() - asked, std::chrono::seconds(1)) << "the probes waited behind the slow";
  EXPECT_THAT(Receive(post, std::chrono::seconds(2)), ::testing::StartsWith("HTTP/1.1 405"))
      << "a body is refused, not read";
  EXPECT_LT(ResidentBytes() - resident_before, int64_t{32} << 20) << "the body was buffered";

  // Silent past the idle limit: closed by the server.
  std::this_thread::sleep_for(std::chrono::seconds(MetricsEndpoint::kIdleSeconds));
  int closed = 0;
  for (int fd : slow) closed += ClosedByServer(fd, std::chrono::seconds(3));
  EXPECT_EQ(closed, 48);
  for (int fd : slow) close(fd);
  close(post);
  EXPECT_EQ(HttpStatus(address, "/livez"), 200);
}

TEST(ProbePort, OnlyGetAndHeadOfTheThreePaths) {
  auto registry = std::make_shared<prometheus::Registry>();
  bool ready = false;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0, registry, nullptr, [&] { return ready; });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string address = "127.0.0.1:" + std::to_string((*endpoint)->port());
  EXPECT_EQ(HttpStatus(address, "/readyz"), 503);
  ready = true;
  EXPECT_EQ(HttpStatus(address, "/readyz"), 200);
  EXPECT_EQ(HttpStatus(address, "/nothing"), 404);
  Scrape(address);  // 200 with the exposition format's content type
  const int fd = Connect((*endpoint)->port());
  ASSERT_GE(fd, 0);
  const std::string put = "PUT /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
  ASSERT_GT(send(fd, put.data(), put.size(), MSG_NOSIGNAL), 0);
  EXPECT_THAT(Receive(fd, std::chrono::seconds(2)), ::testing::StartsWith("HTTP/1.1 405"));
  close(fd);
}

}  // namespace
}  // namespace lact::testing
