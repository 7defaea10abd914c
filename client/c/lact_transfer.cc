#include "client/c/lact_transfer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/job_io.h"
#include "client/job_transfers.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.pb.h"
#include "proto/job_options.h"
#include "proto/tls.h"

struct LactTransfer {
  lact::v1::JobAccepted accepted;
  std::unique_ptr<lact::ContextInput> context;  // null: no context rows
  std::vector<lact::Tensor> queries;
  std::unique_ptr<lact::OutputTarget> output;  // null: no outputs in band
  lact::JobResult result;
  std::unique_ptr<lact::JobTransfers> transfers;  // null: the input was refused
  absl::Status status;                            // the refusal, then the join's
  mutable absl::Mutex mu;
  int64_t context_sent ABSL_GUARDED_BY(mu) = 0;
  bool joined ABSL_GUARDED_BY(mu) = false;
  std::vector<const std::pair<const std::string, lact::Tensor>*> state;  // after the join
};

namespace {

using lact::v1::JobAccepted;

absl::Status CheckContext(const LactTransferInput& in, const JobAccepted& accepted) {
  if (in.context == nullptr) return absl::OkStatus();
  if (in.context_tokens != accepted.context_tokens() || in.width != accepted.token_width()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the context is [", in.context_tokens, ", ", in.width, "] but the job's is [",
                     accepted.context_tokens(), ", ", accepted.token_width(), "]"));
  }
  for (const lact::v1::ShardRange& shard : accepted.shards()) {
    if (shard.begin() < 0 || shard.tokens() < 0 ||
        shard.begin() + shard.tokens() > in.context_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("shard rows [", shard.begin(), ", +",
                                                     shard.tokens(), ") lie outside the context"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckQueriesAndOutput(const LactTransferInput& in, const JobAccepted& accepted) {
  if (in.query_sets > 0 && in.width != accepted.token_width()) {
    return absl::InvalidArgumentError(absl::StrCat("the query sets are ", in.width,
                                                   " wide but the job's tokens are ",
                                                   accepted.token_width()));
  }
  if (in.query_sets != accepted.query_tokens_size() ||
      (in.query_sets > 0 && (in.queries == nullptr || in.query_tokens == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("the job has ", accepted.query_tokens_size(),
                                                   " query sets; ", in.query_sets, " were given"));
  }
  for (int k = 0; k < in.query_sets; ++k) {
    if (in.queries[k] == nullptr || in.query_tokens[k] != accepted.query_tokens(k)) {
      return absl::InvalidArgumentError(absl::StrCat("query set ", k, " has ", in.query_tokens[k],
                                                     " tokens; the job's has ",
                                                     accepted.query_tokens(k)));
    }
  }
  if ((in.output != nullptr) != accepted.output_in_band()) {
    return absl::InvalidArgumentError(
        accepted.output_in_band() ? "the job's outputs come back in band: give their buffer"
                                  : "the job's outputs go to a file: give no output buffer");
  }
  return absl::OkStatus();
}

// What `in` holds, checked against its JobAccepted, into `t`.
absl::Status Take(const LactTransferInput& in, LactTransfer* t) {
  if (in.accepted == nullptr ||
      !t->accepted.ParseFromArray(in.accepted, static_cast<int>(in.accepted_size))) {
    return absl::InvalidArgumentError("the JobAccepted is not a lact.v1.JobAccepted message");
  }
  absl::Status checked = CheckContext(in, t->accepted);
  if (checked.ok()) checked = CheckQueriesAndOutput(in, t->accepted);
  if (!checked.ok()) return checked;
  if (in.context != nullptr) {
    t->context = std::make_unique<lact::ContextInput>(lact::ContextInput::Wire(
        {in.context, in.context_tokens, in.width, static_cast<lact::WireType>(in.dtype)}));
    LACT_ASSIGN_OR_RETURN(const lact::WireType job_dtype, lact::FromProto(t->accepted.dtype()));
    LACT_RETURN_IF_ERROR(t->context->CheckDtype(job_dtype));
  }
  for (int k = 0; k < in.query_sets; ++k) {
    lact::Tensor& q = t->queries.emplace_back(std::vector<int64_t>{in.query_tokens[k], in.width});
    std::copy_n(in.queries[k], q.size(), q.ptr());
  }
  if (in.output != nullptr)
    t->output = std::make_unique<lact::OutputTarget>(lact::OutputTarget::Buffer(in.output));
  return absl::OkStatus();
}

bool Joined(const LactTransfer* transfer) {
  absl::MutexLock lock(&transfer->mu);
  return transfer->joined;
}

}  // namespace

extern "C" {

int lact_transfer_abi_version(void) { return LACT_TRANSFER_ABI_VERSION; }

LactTransfer* lact_transfer_start(const LactTransferInput* input) {
  auto* t = new (std::nothrow) LactTransfer;
  if (t == nullptr) return nullptr;
  try {
    t->status =
        input != nullptr ? Take(*input, t) : absl::InvalidArgumentError("no LactTransferInput");
    if (!t->status.ok()) return t;
    t->transfers = std::make_unique<lact::JobTransfers>(
        lact::ChannelCredentialsFromPem(input->tls_roots != nullptr ? input->tls_roots : ""),
        t->accepted, t->context.get(), t->queries, t->output.get(), &t->result);
    const auto timeout = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(std::max(0.0, input->timeout_seconds)));
    t->transfers->Start(std::chrono::system_clock::now() + timeout, [t](int64_t sent) {
      absl::MutexLock lock(&t->mu);
      t->context_sent = sent;
    });
  } catch (const std::exception& e) {  // no memory, no thread: nothing may cross into C
    t->transfers.reset();
    t->status =
        absl::ResourceExhaustedError(absl::StrCat("cannot start the transfers: ", e.what()));
  }
  return t;
}

int64_t lact_transfer_wait_sent(LactTransfer* transfer, int64_t seen, double timeout_seconds) {
  absl::MutexLock lock(&transfer->mu);
  const auto more = [transfer, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(transfer->mu) {
    return transfer->context_sent > seen || transfer->joined;
  };
  transfer->mu.AwaitWithTimeout(absl::Condition(&more),
                                absl::Seconds(std::max(0.0, timeout_seconds)));
  return transfer->context_sent;
}

void lact_transfer_cancel(LactTransfer* transfer) {
  if (transfer->transfers != nullptr) transfer->transfers->Cancel();
}

int lact_transfer_join(LactTransfer* transfer, char* message, size_t capacity) {
  if (!Joined(transfer) && transfer->transfers != nullptr) {
    transfer->status = transfer->transfers->Join();
    for (const auto& entry : transfer->result.state) transfer->state.push_back(&entry);
  }
  {
    absl::MutexLock lock(&transfer->mu);
    transfer->joined = true;
  }
  if (message != nullptr && capacity > 0) {
    const std::string text(transfer->status.message());
    const size_t n = std::min(text.size(), capacity - 1);
    std::memcpy(message, text.data(), n);
    message[n] = '\0';
  }
  return static_cast<int>(transfer->status.code());
}

const float* lact_transfer_query_output(const LactTransfer* transfer, int k, int64_t* elements) {
  if (!Joined(transfer) || !transfer->status.ok() || k < 0 ||
      k >= static_cast<int>(transfer->result.queries.size())) {
    return nullptr;
  }
  *elements = transfer->result.queries[k].size();
  return transfer->result.queries[k].ptr();
}

int lact_transfer_state_count(const LactTransfer* transfer) {
  return Joined(transfer) && transfer->status.ok() ? static_cast<int>(transfer->state.size()) : 0;
}

const float* lact_transfer_state(const LactTransfer* transfer, int i, const char** name,
                                 const int64_t** shape, int* rank, int64_t* elements) {
  if (i < 0 || i >= lact_transfer_state_count(transfer)) return nullptr;
  const auto& [tensor_name, tensor] = *transfer->state[i];
  *name = tensor_name.c_str();
  *shape = tensor.shape.data();
  *rank = tensor.rank();
  *elements = tensor.size();
  return tensor.ptr();
}

void lact_transfer_free(LactTransfer* transfer) {
  if (transfer == nullptr) return;
  lact_transfer_cancel(transfer);
  delete transfer;  // ~JobTransfers joins its threads
}

}  // extern "C"
