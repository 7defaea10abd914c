// libFuzzer target: token bytes decoded as a chunk of each wire dtype and
// width (DecodeTokensInto), and whole TokenChunk messages given to a
// worker's TokenReceiver of a small shard and two query sets. The first
// bytes choose the dtype and width; decoding must never write past its
// buffer (ASan) and a chunk the receiver took must be finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/token_codec.h"
#include "google/protobuf/stubs/logging.h"
#include "lact/v1/common.pb.h"
#include "worker/data_plane/token_receiver.h"

namespace {

void DecodeRaw(const uint8_t* data, size_t size, lact::WireType type, int64_t width) {
  std::vector<float> out(64);
  int64_t tokens = 0;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!lact::DecodeTokensInto(bytes, type, width, 0, out.data(), out.size(), &tokens).ok()) return;
  if (tokens * width > static_cast<int64_t>(out.size())) std::abort();
  for (int64_t i = 0; i < tokens * width; ++i) {
    if (!std::isfinite(out[i])) std::abort();
  }
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; the fuzzer makes many.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const lact::WireType type = static_cast<lact::WireType>(1 + data[0] % 3);
  const int64_t width = 1 + data[1] % 8;
  data += 2;
  size -= 2;
  DecodeRaw(data, size, type, width);

  lact::TokenReceiver receiver({16, 3, 5}, width, type, /*context_begin=*/100);
  // The rest is a sequence of length-prefixed TokenChunk messages.
  while (size > 0) {
    const size_t n = data[0] < size ? data[0] : size - 1;
    lact::v1::TokenChunk chunk;
    if (chunk.ParseFromArray(data + 1, static_cast<int>(n))) (void)receiver.Accept(chunk);
    data += 1 + n;
    size -= 1 + n;
  }
  if (receiver.CheckComplete().ok()) {
    for (int set = 0; set < 3; ++set) {
      const lact::Tensor t = receiver.TakeSet(set);
      for (float v : t.data) {
        if (!std::isfinite(v)) std::abort();
      }
    }
  }
  return 0;
}
