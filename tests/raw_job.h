// A job whose client speaks the protocol by hand, with the generated stubs
// and no LactClient: it can send bad chunks, stall, or vanish at any point
// (Cut), as a killed client would.
#ifndef LACT_TESTS_RAW_JOB_H_
#define LACT_TESTS_RAW_JOB_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "lact/v1/coordinator.grpc.pb.h"
#include "lact/v1/data.grpc.pb.h"

namespace lact::testing {

class RawJob {
 public:
  // Submits `spec` and reads the Submit stream up to JobAccepted.
  RawJob(const std::string& address, v1::JobSpec spec);
  const v1::JobAccepted& accepted() const { return accepted_; }
  // Reads the Submit stream to its end.
  grpc::Status Finish();
  // Reads the Submit stream until a Progress of `stage`; false if it ended.
  bool AwaitProgress(v1::Progress::Stage stage);
  // The client vanishes from the Submit call.
  void Cut() { ctx_.TryCancel(); }

  // A Transfer stream to rank `rank`'s worker, its ticket sent.
  struct Transfer {
    std::unique_ptr<v1::ShardDataService::Stub> stub;
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReaderWriter<v1::TransferRequest, v1::TransferResponse>> stream;
    bool writes_done = false;  // the client's side is closed
    // Closes the client's side (unless it is) and reads to the end.
    grpc::Status Close();
    // The same, keeping set 0's output rows, in order, in `rows`.
    grpc::Status CloseKeepingOutputs(std::string* rows);
    void Cut() { ctx->TryCancel(); }
  };
  Transfer Open(int rank, const std::string& ticket);
  // Opens rank `rank`'s stream and sends its first `tokens` context rows
  // (all: -1) of `context` and, if they were all sent, rank 0's query sets,
  // float32, in chunks of at most 4 MiB; closes the client's side once all
  // of it was sent.
  Transfer Upload(int rank, const Tensor& context, const std::vector<Tensor>& queries,
                  int64_t tokens = -1);

 private:
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubmitResponse>> stream_;
  v1::JobAccepted accepted_;
};

// The status of a raw ShardDataService.FetchResult of `accepted`'s job from rank
// `rank`'s worker, with its fetch_ticket (30 s deadline; the rows read are
// dropped): what that worker itself answers.
grpc::Status RawFetch(const v1::JobAccepted& accepted, int rank);

}  // namespace lact::testing

#endif  // LACT_TESTS_RAW_JOB_H_
