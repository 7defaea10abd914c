// Segment composition, the primitive of the distributed scan: a sequence cut
// into 1..5 random segments, each scanned from zero and composed through the
// summaries, equals the whole-sequence scan, in both directions; conv
// histories composed from neighbours' boundary rows give the whole conv;
// LaCT gradient partial sums over a random partition of a chunk add up to
// the whole-chunk sums and give the same update.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/random.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/lact_layer.h"
#include "kernels/cpu/ssd_scan.h"
#include "tests/random_model.h"

namespace lact::testing {
namespace {

std::vector<float> Normal(Random& r, int64_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * r.Normal());
  return v;
}

double MaxRelDiff(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
    mag = std::max(mag, static_cast<double>(std::abs(want[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

// Random cut points: segment lengths >= 1 summing to T (some of length 1).
std::vector<int64_t> RandomSegments(Random& r, int64_t T) {
  const int64_t count = std::min<int64_t>(T, 1 + r.NextU64() % 5);
  std::vector<int64_t> cuts = {0, T};
  while (static_cast<int64_t>(cuts.size()) < count + 1) {
    const int64_t c = 1 + r.NextU64() % (T - 1);
    if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> lengths;
  for (size_t i = 1; i < cuts.size(); ++i) lengths.push_back(cuts[i] - cuts[i - 1]);
  return lengths;
}

// Sequence data in scan order; the backward direction reverses rows.
struct ScanData {
  int64_t T;
  int H, P, N;
  std::vector<float> x, b, c, dt, a, d;
  ScanData Reversed() const {
    ScanData r = *this;
    const auto flip = [&](std::vector<float>& v, int64_t width) {
      for (int64_t t = 0; t < T / 2; ++t)
        std::swap_ranges(v.begin() + t * width, v.begin() + (t + 1) * width,
                         v.begin() + (T - 1 - t) * width);
    };
    flip(r.x, H * P);
    flip(r.b, N);
    flip(r.c, N);
    flip(r.dt, H);
    return r;
  }
  cpu::ScanParams Params(int64_t t0, int64_t n, float* y) {
    return {n,
            H,
            P,
            N,
            x.data() + t0 * H * P,
            H * P,
            b.data() + t0 * N,
            N,
            c.data() + t0 * N,
            N,
            dt.data() + t0 * H,
            H,
            a.data(),
            d.data(),
            y + t0 * H * P,
            H * P};
  }
};

ScanData RandomScanData(Random& r, int64_t T) {
  ScanData s{T,
             1 + static_cast<int>(r.NextU64() % 3),
             1 + static_cast<int>(r.NextU64() % 6),
             1 + static_cast<int>(r.NextU64() % 6),
             {},
             {},
             {},
             {},
             {},
             {}};
  s.x = Normal(r, T * s.H * s.P);
  s.b = Normal(r, T * s.N);
  s.c = Normal(r, T * s.N);
  s.dt.resize(T * s.H);
  for (float& v : s.dt) v = static_cast<float>(0.01 + 0.2 * r.Uniform());
  s.a.resize(s.H);
  for (float& v : s.a) v = static_cast<float>(-std::exp(2.0 * r.Uniform()));
  s.d = Normal(r, s.H);
  return s;
}

class ScanCompositionTest : public ::testing::TestWithParam<int> {};

TEST_P(ScanCompositionTest, SegmentsFromZeroComposeToWhole) {
  Random r(GetParam());
  const int64_t T = 1 + r.NextU64() % 200;
  ScanData forward = RandomScanData(r, T);
  for (bool backward : {false, true}) {
    // Backward: the direction scans the reversed sequence; its segments are
    // the original segments taken from the right.
    ScanData s = backward ? forward.Reversed() : forward;
    const int64_t per_head = s.P * s.N, state_size = s.H * per_head;
    const std::vector<float> initial = Normal(r, state_size);
    std::vector<float> want_y(T * s.H * s.P), want_state = initial;
    cpu::SsdScan(s.Params(0, T, want_y.data()), want_state.data(), nullptr);

    std::vector<float> y(T * s.H * s.P), carry = initial, carry_log(s.H, 0.0f);
    int64_t t0 = 0;
    for (int64_t n : RandomSegments(r, T)) {
      std::vector<float> state(state_size, 0.0f), log_decay(s.H);
      cpu::ScanParams p = s.Params(t0, n, y.data());
      cpu::SsdScan(p, state.data(), log_decay.data());  // from zero
      cpu::SsdAddCarry(p, carry.data());
      cpu::ComposeScanSummary(s.H, per_head, carry.data(), carry_log.data(), state.data(),
                              log_decay.data(), carry.data(), carry_log.data());
      t0 += n;
    }
    EXPECT_LE(MaxRelDiff(y, want_y), 1e-5) << (backward ? "backward" : "forward") << " T=" << T;
    EXPECT_LE(MaxRelDiff(carry, want_state), 1e-5)
        << (backward ? "backward" : "forward") << " T=" << T;
  }
}

INSTANTIATE_TEST_SUITE_P(Random, ScanCompositionTest, ::testing::Range(0, 25));

class ConvCompositionTest : public ::testing::TestWithParam<int> {};

TEST_P(ConvCompositionTest, HistoriesFromNeighboursGiveWhole) {
  Random r(GetParam() + 1000);
  const int64_t T = 1 + r.NextU64() % 40, C = 1 + r.NextU64() % 9;
  const int W = 1 + static_cast<int>(r.NextU64() % 5);
  const std::vector<float> u = Normal(r, T * C), weight = Normal(r, C * W), bias = Normal(r, C);
  for (bool backward : {false, true}) {
    std::vector<float> seq = u;  // scan order
    if (backward)
      for (int64_t t = 0; t < T / 2; ++t)
        std::swap_ranges(seq.begin() + t * C, seq.begin() + (t + 1) * C,
                         seq.begin() + (T - 1 - t) * C);
    const std::vector<float> initial = Normal(r, (W - 1) * C);
    std::vector<float> want(T * C), want_history = initial;
    cpu::CausalConvSilu({T, C, W, seq.data(), C, weight.data(), bias.data(), want.data(), C},
                        want_history.data());

    const std::vector<int64_t> lengths = RandomSegments(r, T);
    // Boundary rows each segment receives: the composed tails of everything
    // to its left (segments shorter than W-1 pass on older rows).
    std::vector<std::vector<float>> halos;
    std::vector<float> history = initial;
    int64_t t0 = 0;
    for (int64_t n : lengths) {
      halos.push_back(history);
      cpu::AdvanceConvHistory(seq.data() + t0 * C, C, n, C, W, history.data());
      t0 += n;
    }
    std::vector<float> got(T * C);
    t0 = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      cpu::CausalConvSilu({lengths[k], C, W, seq.data() + t0 * C, C, weight.data(), bias.data(),
                           got.data() + t0 * C, C},
                          halos[k].data());
      t0 += lengths[k];
    }
    EXPECT_LE(MaxRelDiff(got, want), 1e-6);
    EXPECT_EQ(history, want_history);
    EXPECT_EQ(halos.back(), want_history) << "last segment's returned history is the conv state";
  }
}

INSTANTIATE_TEST_SUITE_P(Random, ConvCompositionTest, ::testing::Range(0, 25));

class LactPartialSumTest : public ::testing::TestWithParam<int> {};

TEST_P(LactPartialSumTest, PartitionSumsEqualWholeChunk) {
  Random r(GetParam() + 2000);
  ModelConfig c;
  c.d_model = 12;
  c.ttt.head_dim = 6;
  c.ttt.inter_multi = 2;
  c.ttt.muon_steps = static_cast<int>(r.NextU64() % 3);
  c.ssm.head_dim = 8;
  const int64_t T = 1 + r.NextU64() % 60, D = c.d_model, ht = c.ttt_heads();
  const int64_t mat = c.ttt.head_dim * c.fast_hidden(), fast_size = ht * mat;
  const std::vector<float> kv = Normal(r, T * 2 * D, 0.3);
  std::vector<float> lr(T * 3 * ht);
  for (float& v : lr) v = static_cast<float>(0.05 * r.Uniform());
  const std::vector<float> w0 = Normal(r, fast_size, 0.3), w1 = Normal(r, fast_size, 0.3),
                           w2 = Normal(r, fast_size, 0.3);
  const cpu::FastWeightsRef fast{w0.data(), w1.data(), w2.data()};
  cpu::LactWorkspace ws;

  std::vector<float> want0(fast_size), want1(fast_size), want2(fast_size);
  cpu::AccumulateFastWeightGrads(c, kv.data(), lr.data(), T, fast,
                                 {want0.data(), want1.data(), want2.data()}, &ws);

  // A random partition of the tokens (not contiguous): gather each part.
  std::vector<int64_t> order(T);
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = T - 1; i > 0; --i) std::swap(order[i], order[r.NextU64() % (i + 1)]);
  std::vector<float> got0(fast_size), got1(fast_size), got2(fast_size);
  int64_t start = 0;
  for (int64_t n : RandomSegments(r, T)) {
    std::vector<float> part_kv(n * 2 * D), part_lr(n * 3 * ht);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(kv.begin() + order[start + i] * 2 * D, 2 * D, part_kv.begin() + i * 2 * D);
      std::copy_n(lr.begin() + order[start + i] * 3 * ht, 3 * ht, part_lr.begin() + i * 3 * ht);
    }
    cpu::AccumulateFastWeightGrads(c, part_kv.data(), part_lr.data(), n, fast,
                                   {got0.data(), got1.data(), got2.data()}, &ws);
    start += n;
  }
  EXPECT_LE(MaxRelDiff(got0, want0), 1e-5);
  EXPECT_LE(MaxRelDiff(got1, want1), 1e-5);
  EXPECT_LE(MaxRelDiff(got2, want2), 1e-5);

  std::vector<float> a0 = w0, a1 = w1, a2 = w2, b0 = w0, b1 = w1, b2 = w2;
  cpu::UpdateFastWeights(c, {want0.data(), want1.data(), want2.data()}, fast, a0.data(), a1.data(),
                         a2.data());
  cpu::UpdateFastWeights(c, {got0.data(), got1.data(), got2.data()}, fast, b0.data(), b1.data(),
                         b2.data());
  EXPECT_LE(MaxRelDiff(b0, a0), 1e-5);
  EXPECT_LE(MaxRelDiff(b1, a1), 1e-5);
  EXPECT_LE(MaxRelDiff(b2, a2), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Random, LactPartialSumTest, ::testing::Range(0, 20));

}  // namespace
}  // namespace lact::testing
