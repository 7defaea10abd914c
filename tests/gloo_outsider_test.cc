// A connection from outside a Gloo group, made to a pair's listening port the
// moment it listens, takes that pair's place in Gloo's mesh (a pair accepts
// the first connection that arrives). GlooCollective::Connect checks every
// pair with the group's key before the mesh is used and builds a new mesh
// when one fails: the group still connects, and its all-reduce sums exactly
// the ranks' values. Real Gloo over TCP on 127.0.0.1; the ranks are threads
// of this process, and the outsider acts from inside the store they meet in.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
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

// The in-process store the ranks meet through, with an outsider in it:
// before each value goes in, it connects to every listening port of this
// process it has not seen (up to `limit` connections) and sends junk. A rank
// publishes its pairs' addresses only once they listen, and its peers connect
// only after reading them, so the outsider's connection is always first.
class IntrudingStore final : public gloo::rendezvous::HashStore {
 public:
  explicit IntrudingStore(int limit) : seen_(OwnListeningPorts()), limit_(limit) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int port : OwnListeningPorts()) {
        if (accepted_ < limit_ && seen_.insert(port).second && Intrude(port)) ++accepted_;
      }
    }
    HashStore::set(key, data);
  }

  int accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }

 private:
  std::mutex mu_;
  std::set<int> seen_;
  const int limit_;
  int accepted_ = 0;
};

TEST(GlooOutsider, ConnectionToAListeningPortDoesNotTakeAPeersPlace) {
  constexpr int kRanks = 3;
  IntrudingStore store(/*limit=*/2);
  GlooOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  std::vector<float> sums(kRanks, 0.0f);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      auto collective = GlooCollective::Connect(store, "outsider", rank, kRanks, options);
      if (!collective.ok()) {
        errors[rank] = collective.status().ToString();
        return;
      }
      float value = static_cast<float>(rank + 1);
      const absl::Status reduced = (*collective)->AllReduceSum(&value, 1);
      if (!reduced.ok()) errors[rank] = reduced.ToString();
      sums[rank] = value;
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_GE(store.accepted(), 1) << "the outsider never reached a listening port: nothing tested";
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(sums[rank], 6.0f) << "rank " << rank;
  }
}

}  // namespace
}  // namespace lact::testing
