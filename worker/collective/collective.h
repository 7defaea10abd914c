// The collective engine a shard runner talks to its peers through.
//
// Contract: every rank of a group calls the same operations in the same
// order with the same counts; an implementation fails (returns a status,
// never aborts or hangs past its timeout) when a peer dies or stalls. One
// Collective is used by one thread at a time; a runner that overlaps a
// gradient all-reduce with compute uses a second Collective of the same group.
#ifndef LACT_WORKER_COLLECTIVE_COLLECTIVE_H_
#define LACT_WORKER_COLLECTIVE_COLLECTIVE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace lact {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0:count] <- sum over ranks, in place.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
  // out[r*count : (r+1)*count] <- rank r's in[0:count].
  virtual absl::Status AllGather(const float* in, size_t count, float* out) = 0;
};

// The group of one: every operation is the identity.
class LocalCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduceSum(float*, size_t) override { return absl::OkStatus(); }
  absl::Status AllGather(const float* in, size_t count, float* out) override;
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_COLLECTIVE_H_
