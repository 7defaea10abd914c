#include "worker/schedule/shard_exchange.h"

#include <algorithm>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/ssd_scan.h"

namespace lact {

int ScanPosition(Direction dir, int rank, int ranks) {
  return dir == kForward ? rank : ranks - 1 - rank;
}

int RankAtScanPosition(Direction dir, int pos, int ranks) {
  return dir == kForward ? pos : ranks - 1 - pos;
}

int64_t HaloPacketSize(const ModelConfig& c) {
  return 1 + int64_t{c.ssm.conv_width - 1} * c.conv_channels();
}

std::vector<float> HaloPacket(const ModelConfig& c, const MambaDirWeights& w, const float* tail,
                              int64_t k) {
  const int64_t D = c.d_model, di = c.d_inner(), C = c.conv_channels();
  std::vector<float> packet(HaloPacketSize(c), 0.0f);
  packet[0] = static_cast<float>(k);
  cpu::Linear(tail, D, k, D, w.in_proj + di * D, C, packet.data() + 1, C);
  return packet;
}

void ComposeHalos(const ModelConfig& c, Direction dir, int rank, int ranks, const float* packets,
                  MambaState* start, MambaState* final) {
  const int64_t C = c.conv_channels(), size = HaloPacketSize(c);
  const int pos = ScanPosition(dir, rank, ranks);
  for (int i = 0; i < ranks; ++i) {
    if (i == pos) start->conv = final->conv;
    const float* packet = packets + RankAtScanPosition(dir, i, ranks) * size;
    cpu::AdvanceConvHistory(packet + 1, C, static_cast<int64_t>(packet[0]), C, c.ssm.conv_width,
                            final->conv.ptr());
  }
}

int64_t SummarySize(const ModelConfig& c) {
  const int64_t heads = c.ssm_heads();
  return heads + heads * c.ssm.head_dim * c.ssm.d_state;
}

void ComposeSummaries(const ModelConfig& c, Direction dir, int rank, int ranks, const float* all,
                      int64_t stride, int64_t offset, MambaState* start, MambaState* final) {
  const int heads = c.ssm_heads();
  const int64_t per_head = int64_t{c.ssm.head_dim} * c.ssm.d_state;
  const int pos = ScanPosition(dir, rank, ranks);
  std::vector<float> log_decay(heads, 0.0f);
  for (int i = 0; i < ranks; ++i) {
    if (i == pos) start->ssm = final->ssm;
    const float* s = all + RankAtScanPosition(dir, i, ranks) * stride + offset;
    cpu::ComposeScanSummary(heads, per_head, final->ssm.ptr(), log_decay.data(), s + heads, s,
                            final->ssm.ptr(), log_decay.data());
  }
}

}  // namespace lact
