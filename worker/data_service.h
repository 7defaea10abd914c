// The ShardData service of a worker (data.proto; a thin adapter): a
// client's Transfer stream finds its shard on the TransferBoard by job,
// rank and ticket, sends the shard's tokens into it and takes back its
// outputs, query outputs and fused state, in messages of at most 4 MiB.
#ifndef LACT_WORKER_DATA_SERVICE_H_
#define LACT_WORKER_DATA_SERVICE_H_

#include "lact/v1/data.grpc.pb.h"
#include "worker/shard_transfer.h"

namespace lact {

class DataService final : public v1::ShardData::Service {
 public:
  explicit DataService(TransferBoard* board) : board_(board) {}

  grpc::Status Transfer(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<v1::TransferResponse, v1::TransferRequest>* stream) override;

 private:
  TransferBoard* board_;
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_SERVICE_H_
