// The host-side arithmetic of a BiMamba shard's exchanges with its peers
// (see bimamba_schedule.h), whatever the backend: the conv halo
// packets and the scan summaries of one direction, and their composition
// into the state a shard starts from and the state after the whole sequence.
//
// Ranks hold contiguous shards in rank order. A direction's scan order is
// rank order forward and reversed backward; packets and summaries are
// all-gathered rank-major and composed in scan order.
#ifndef LACT_WORKER_SCHEDULE_SHARD_EXCHANGE_H_
#define LACT_WORKER_SCHEDULE_SHARD_EXCHANGE_H_

#include <cstdint>
#include <vector>

#include "common/fused_state.h"
#include "common/model.h"

namespace lact {

// The shard's place in `dir`'s scan order, and the rank at place `pos`.
int ScanPosition(Direction dir, int rank, int ranks);
int RankAtScanPosition(Direction dir, int pos, int ranks);

// Floats in one halo packet: [count, (W-1) rows of C conv inputs].
int64_t HaloPacketSize(const ModelConfig& c);

// The packet of a shard whose last k <= W-1 normed rows in scan order are
// `tail` ([k, D]): their conv inputs (the in_proj rows of the conv part).
std::vector<float> HaloPacket(const ModelConfig& c, const MambaDirWeights& w, const float* tail,
                              int64_t k);

// From every rank's packet (rank-major): `start->conv`, the history this
// shard's scan starts from, and `final->conv`, the history after the whole
// sequence. Both start as zeros.
void ComposeHalos(const ModelConfig& c, Direction dir, int rank, int ranks, const float* packets,
                  MambaState* start, MambaState* final);

// Floats in one direction's summary: [log decay (H_s), state from zero (H_s*P*N)].
int64_t SummarySize(const ModelConfig& c);

// From every rank's summary (rank r's at all[r * stride + offset]):
// `start->ssm`, this shard's carry-in state, and `final->ssm`, the state
// after the whole sequence. Both start as zeros.
void ComposeSummaries(const ModelConfig& c, Direction dir, int rank, int ranks, const float* all,
                      int64_t stride, int64_t offset, MambaState* start, MambaState* final);

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_SHARD_EXCHANGE_H_
