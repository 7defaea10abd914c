#include "worker/collective/gloo_collective.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/context.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/collective/rendezvous_timeout.h"

namespace lact {
namespace {

// Runs a Gloo call, turning its exceptions into a status naming `what`.
template <typename Fn>
absl::Status Guard(const char* what, Fn fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const RendezvousTimeout& e) {
    return absl::DeadlineExceededError(absl::StrCat("gloo ", what, " timed out: ", e.what()));
  } catch (const RendezvousUnavailable& e) {
    return absl::UnavailableError(absl::StrCat("gloo ", what, " failed: ", e.what()));
  } catch (const gloo::IoException& e) {
    // Gloo's transport has no timeout type: its timeouts say so.
    if (absl::StrContains(e.what(), "Timed out")) {
      return absl::DeadlineExceededError(absl::StrCat("gloo ", what, " timed out: ", e.what()));
    }
    return absl::UnavailableError(
        absl::StrCat("gloo ", what, " failed, a peer is gone: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo ", what, " failed: ", e.what()));
  }
}

// A mesh is built at most this many times before the group gives up.
constexpr int kMeshAttempts = 4;
// The Gloo context's timeout while its pairs connect (once every rank has
// arrived): Gloo waits up to 5 times this for a pair to connect, which a
// pair whose listening socket an outsider took can take in full. Longer
// collective timeouts apply once the mesh is checked.
constexpr std::chrono::milliseconds kConnectTimeout{5000};
// The group key, then the sender's rank.
constexpr size_t kKeyBytes = 16;
struct Greeting {
  std::array<char, kKeyBytes> key;
  int32_t rank;
};

// Publishes this rank's verdict on step `what` and reads every rank's:
// whether all said ok. Throws (as the store does) when a rank does not say
// within `timeout`.
bool AllRanksSay(gloo::rendezvous::Store& store, const std::string& what, int rank, int size,
                 bool ok, std::chrono::milliseconds timeout) {
  store.set(absl::StrCat(what, "/", rank), std::vector<char>{ok ? '1' : '0'});
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(absl::StrCat(what, "/", r));
  store.wait(keys, timeout);
  bool all = true;
  for (const std::string& key : keys) {
    const std::vector<char> said = store.get(key);
    all = all && said.size() == 1 && said[0] == '1';
  }
  return all;
}

// The group's key for this attempt: rank 0 draws it and publishes it in the
// store (which only the group's ranks reach); the others read it there.
std::array<char, kKeyBytes> GroupKey(gloo::rendezvous::Store& store, int rank,
                                     std::chrono::milliseconds timeout) {
  std::array<char, kKeyBytes> key{};
  if (rank == 0) {
    std::random_device random;  // the kernel's generator (getrandom)
    for (size_t i = 0; i < kKeyBytes; i += sizeof(unsigned)) {
      const unsigned word = random();
      std::memcpy(key.data() + i, &word, std::min(sizeof(unsigned), kKeyBytes - i));
    }
    store.set("key", std::vector<char>(key.begin(), key.end()));
    return key;
  }
  store.wait({"key"}, timeout);
  const std::vector<char> got = store.get("key");
  if (got.size() != kKeyBytes) throw std::runtime_error("rendezvous: a malformed group key");
  std::copy(got.begin(), got.end(), key.begin());
  return key;
}

// Every rank sends each peer the group key and its rank over the mesh and
// checks what each peer sent. A pair whose listening socket took a
// connection from outside the group fails here (the outsider does not know
// the key; the peer it displaced cannot reach it).
absl::Status CheckPeers(gloo::Context& context, const std::array<char, kKeyBytes>& key, int rank,
                        int size, std::chrono::milliseconds timeout) {
  Greeting mine{key, rank};
  std::vector<Greeting> theirs(size);
  const int slot = context.nextSlot();
  auto out = context.createUnboundBuffer(&mine, sizeof(mine));
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> in;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    in.push_back(context.createUnboundBuffer(&theirs[peer], sizeof(Greeting)));
    in.back()->recv(peer, slot);
    out->send(peer, slot);
  }
  for (auto& buffer : in) buffer->waitRecv(timeout);
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) out->waitSend(timeout);
  }
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    if (theirs[peer].key != key || theirs[peer].rank != peer) {
      return absl::UnauthenticatedError(
          absl::StrCat("gloo: the connection to rank ", peer, " is not that rank's"));
    }
  }
  return absl::OkStatus();
}

// One attempt at a checked mesh: its context, or its status and whether the
// group should build a new mesh (every rank reached the store, but some
// pair did not connect or failed the check). A rank missing from the store
// is final: a peer is gone.
struct MeshAttempt {
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status;
  bool retry = false;
};

MeshAttempt TryMesh(gloo::rendezvous::Store& store, int rank, int size,
                    const GlooOptions& options) {
  const std::chrono::milliseconds connect_timeout = std::min(options.timeout, kConnectTimeout);
  // Long enough for a rank to wait out a pair that never connects.
  const std::chrono::milliseconds say_timeout = 5 * connect_timeout + options.timeout;
  std::array<char, kKeyBytes> key{};
  absl::Status said = Guard("connect", [&] {
    AllRanksSay(store, "arrived", rank, size, true, options.timeout);
    key = GroupKey(store, rank, options.timeout);
  });
  if (!said.ok()) return {nullptr, said, false};
  std::shared_ptr<gloo::rendezvous::Context> context;
  const absl::Status connected = Guard("connect", [&] {
    gloo::transport::tcp::attr attr(options.hostname.c_str());
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(connect_timeout);
    context->connectFullMesh(store, device);
    context->setTimeout(options.timeout);
  });
  bool all = false;
  said = Guard("connect", [&] {
    all = AllRanksSay(store, "connected", rank, size, connected.ok(), say_timeout);
  });
  if (!said.ok()) return {nullptr, said, false};
  if (!all) {
    return {nullptr,
            connected.ok() ? absl::UnavailableError("gloo connect failed at a peer") : connected,
            true};
  }
  absl::Status checked;
  const absl::Status guarded = Guard(
      "connect check", [&] { checked = CheckPeers(*context, key, rank, size, connect_timeout); });
  if (!guarded.ok()) checked = guarded;
  said = Guard("connect",
               [&] { all = AllRanksSay(store, "checked", rank, size, checked.ok(), say_timeout); });
  if (!said.ok()) return {nullptr, said, false};
  if (!all) {
    return {nullptr,
            checked.ok() ? absl::UnavailableError("gloo connect check failed at a peer") : checked,
            true};
  }
  return {std::move(context), absl::OkStatus(), false};
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Connect(
    gloo::rendezvous::Store& store, const std::string& prefix, int rank, int size,
    const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is outside a group of ", size));
  }
  absl::Status last;
  for (int attempt = 0; attempt < kMeshAttempts; ++attempt) {
    gloo::rendezvous::PrefixStore attempt_store(absl::StrCat(prefix, "/mesh", attempt), store);
    MeshAttempt mesh = TryMesh(attempt_store, rank, size, options);
    if (mesh.context != nullptr) {
      return std::unique_ptr<GlooCollective>(
          new GlooCollective(std::move(mesh.context), rank, size));
    }
    if (!mesh.retry) return mesh.status;
    last = mesh.status;
    Log(LogLevel::kWarn, "gloo_mesh_retry",
        {{"group", prefix}, {"rank", rank}, {"attempt", attempt + 1}, {"error", last.message()}});
  }
  return absl::UnavailableError(absl::StrCat(
      "gloo connect failed ", kMeshAttempts, " times: ", last.message(),
      " (a connection from outside the job to a worker's Gloo port takes the place of a peer; "
      "only the workers should reach those ports)"));
}

GlooCollective::~GlooCollective() = default;

absl::Status GlooCollective::AllReduceSum(float* data, size_t count) {
  if (count == 0) return absl::OkStatus();
  return Guard("all-reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  });
}

absl::Status GlooCollective::AllGather(const float* in, size_t count, float* out) {
  if (count == 0) return absl::OkStatus();
  return Guard("all-gather", [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<float*>(in), count);
    opts.setOutput(out, count * size_);
    gloo::allgather(opts);
  });
}

}  // namespace lact
