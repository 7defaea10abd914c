// A model's linear-layer weights in the blocked layout of oneDNN's matmul
// kernels (brgemm), made once per weight and precision on its first use,
// and the matmul primitives that read them, made once per shape and thread
// and reused. Without it every product re-lays its weights out: sgemm
// packs B on each call, and the bf16 matmul reads a plain B it copies into
// blocks. Measured on one core of an AMX Xeon (M = 512): float32 1-12%
// and bf16 2-26% faster than the same products on plain weights.
//
// A weight is identified by its address and shape: it must not change, nor
// its memory be reused for another, while the PackedWeights lives (a
// model's tensors, for the ops that run it). Safe to call from any number
// of threads at once; a product inside a parallel region (a row slice)
// runs on the calling thread.
#ifndef LACT_KERNELS_CPU_PACKED_WEIGHTS_H_
#define LACT_KERNELS_CPU_PACKED_WEIGHTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/synchronization/mutex.h"

namespace lact::cpu {

class PackedWeights {
 public:
  PackedWeights();
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // y[rows, out] = x[rows, in] @ w[out, in]^T + beta * y, beta 0 or 1, on
  // w packed (in float32, or rounded to bf16 with `bf16`: x is then rounded
  // to bf16 as it is packed, float32 accumulation, as MatmulBf16 computes).
  // Row-major with leading dimensions ldx, ldy. Returns false, leaving y as
  // it was, where it does not run: another beta, an empty product, or no
  // brgemm kernel in oneDNN for the shape or this CPU, or oneDNN or an
  // allocation failing (the caller then uses sgemm or MatmulBf16).
  bool Linear(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w, int64_t out,
              float* y, int64_t ldy, float beta, bool bf16);

  // The same with x given as bf16 values ([rows, in], dense): the bf16
  // product without a float32 x to read and round (the caller made x as
  // bf16).
  bool LinearBf16(const uint16_t* x, int64_t rows, int64_t in, const float* w, int64_t out,
                  float* y, int64_t ldy, float beta);

  // The weights packed so far, for tests.
  int64_t size() const;

 private:
  struct Weight;
  // A product's x: float32 rows (row stride ld), or dense bf16 ones.
  struct Source {
    const float* f32;
    const uint16_t* bf16;
    int64_t ld;
  };
  bool Multiply(const Source& x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
                int64_t ldy, float beta, bool bf16);
  using Key = std::tuple<const float*, int64_t, int64_t, bool>;  // w, out, in, bf16
  // The packed weight for `key`, packed now if it is new; null where oneDNN
  // has no brgemm kernel for it. Throws what oneDNN or an allocation throws.
  const Weight* Get(const Key& key);

  mutable absl::Mutex mu_;
  std::map<Key, std::unique_ptr<Weight>> weights_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_PACKED_WEIGHTS_H_
