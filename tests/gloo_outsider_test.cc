// A connection from outside a Gloo group, made to a pair's listening port the
// moment it listens, takes that pair's place in Gloo's mesh (a pair accepts
// the first connection that arrives). GlooCollective::Connect checks every
// pair with the group's key before the mesh is used and builds a new mesh
// when one fails: the group still connects, and its all-reduce sums exactly
// the ranks' values. Real Gloo over TCP on 127.0.0.1; the ranks and the
// outsider are threads of this process.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "worker/collective/gloo_collective.h"

namespace lact::testing {
namespace {

// Inodes of this process's sockets (/proc/self/fd -> "socket:[INODE]").
std::set<std::string> OwnSocketInodes() {
  std::set<std::string> inodes;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return inodes;
  while (dirent* entry = readdir(dir)) {
    char target[64] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    const std::string link(target, n > 0 ? n : 0);
    if (link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  closedir(dir);
  return inodes;
}

// Ports this process listens on over IPv4 (/proc/self/net/tcp, state 0A).
std::set<int> OwnListeningPorts() {
  const std::set<std::string> own = OwnSocketInodes();
  std::set<int> ports;
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);
  while (std::getline(table, line)) {
    std::istringstream row(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
        inode;
    if (state == "0A" && own.count(inode) > 0) {
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// Connects to 127.0.0.1:port and sends junk: whether the connection was made.
bool Intrude(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (connected) {
    const std::vector<char> junk(4096, '\x5a');
    (void)send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  }
  close(fd);
  return connected;
}

// One group of `size` ranks connecting and summing rank + 1 while an outsider
// connects to each new listening port of this process and sends junk.
struct Attempt {
  int accepted = 0;  // connections the outsider made
  std::vector<float> sums;
  std::vector<std::string> errors;
};

Attempt ConnectWithAnOutsider(int size, const std::string& prefix) {
  constexpr int kOutsiderConnections = 2;
  const std::set<int> before = OwnListeningPorts();
  std::atomic<bool> done{false};
  std::atomic<int> accepted{0};
  std::thread outsider([&] {
    std::set<int> seen = before;
    while (!done && accepted < kOutsiderConnections) {
      for (int port : OwnListeningPorts()) {
        if (seen.insert(port).second && Intrude(port)) ++accepted;
      }
    }
  });
  gloo::rendezvous::HashStore store;
  GlooOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  Attempt a{0, std::vector<float>(size, 0.0f), std::vector<std::string>(size)};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      auto collective = GlooCollective::Connect(store, prefix, rank, size, options);
      if (!collective.ok()) {
        a.errors[rank] = collective.status().ToString();
        return;
      }
      float value = static_cast<float>(rank + 1);
      const absl::Status reduced = (*collective)->AllReduceSum(&value, 1);
      if (!reduced.ok()) a.errors[rank] = reduced.ToString();
      a.sums[rank] = value;
    });
  }
  for (std::thread& t : ranks) t.join();
  done = true;
  outsider.join();
  a.accepted = accepted.load();
  return a;
}

TEST(GlooOutsider, ConnectionToAListeningPortDoesNotTakeAPeersPlace) {
  constexpr int kRanks = 3;
  // A group can connect before the outsider sees its ports; each attempt
  // must still sum exactly, and one of up to 5 must have been intruded on.
  int accepted = 0;
  for (int attempt = 0; attempt < 5 && accepted == 0; ++attempt) {
    const Attempt a = ConnectWithAnOutsider(kRanks, "outsider" + std::to_string(attempt));
    accepted = a.accepted;
    for (int rank = 0; rank < kRanks; ++rank) {
      EXPECT_EQ(a.errors[rank], "") << "attempt " << attempt << ", rank " << rank;
      EXPECT_EQ(a.sums[rank], 6.0f) << "attempt " << attempt << ", rank " << rank;
    }
  }
  EXPECT_GE(accepted, 1) << "the outsider never reached a listening port: nothing tested";
}

}  // namespace
}  // namespace lact::testing
