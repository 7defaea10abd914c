#include "worker/collective/gloo_collective.h"

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace lact {
namespace {

// Runs a Gloo call, turning its exceptions into a status naming `what`.
template <typename Fn>
absl::Status Guard(const char* what, Fn fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    if (absl::StrContains(e.what(), "Timed out")) {
      return absl::DeadlineExceededError(absl::StrCat("gloo ", what, " timed out: ", e.what()));
    }
    return absl::UnavailableError(
        absl::StrCat("gloo ", what, " failed, a peer is gone: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo ", what, " failed: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Connect(
    gloo::rendezvous::Store& store, const std::string& prefix, int rank, int size,
    const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is outside a group of ", size));
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = Guard("connect", [&] {
    gloo::transport::tcp::attr attr(options.hostname.c_str());
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(prefix, store);
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(prefixed, device);
  });
  if (!status.ok()) return status;
  return std::unique_ptr<GlooCollective>(new GlooCollective(std::move(context), rank, size));
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
