// Tokens on the wire: little-endian f32, bf16 or f16 bytes <-> float32.
// Decoding rejects a byte count that is not a whole number of tokens and any
// NaN or Inf, naming the token (global index = first_token + row).
#ifndef LACT_COMMON_TOKEN_CODEC_H_
#define LACT_COMMON_TOKEN_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lact {

enum class WireType { kF32 = 1, kBF16 = 2, kF16 = 3 };

int WireBytes(WireType type);
// "f32", "bf16" or "f16": the dtype's name in the CLI's --dtype and the
// clients' messages.
const char* WireTypeName(WireType type);
// The WireType of such a name, or INVALID_ARGUMENT naming `what` (the
// flag or field it came from) and the names allowed.
absl::StatusOr<WireType> WireTypeNamed(absl::string_view name, absl::string_view what);

// Decodes into dst, which has room for `capacity` floats (INVALID_ARGUMENT
// when the chunk is larger); *tokens receives the number of tokens.
absl::Status DecodeTokensInto(absl::string_view bytes, WireType type, int64_t width,
                              int64_t first_token, float* dst, int64_t capacity, int64_t* tokens);

// As DecodeTokensInto, for bytes that arrive in pieces (gRPC's slices): the
// pieces are read in order as one run of bytes.
absl::Status DecodeTokenPiecesInto(const std::vector<absl::string_view>& pieces, WireType type,
                                   int64_t width, int64_t first_token, float* dst, int64_t capacity,
                                   int64_t* tokens);

// INVALID_ARGUMENT naming the first NaN or Inf among count floats.
absl::Status CheckFinite(const float* values, int64_t count, int64_t width, int64_t first_token);

// float32 -> wire bytes (bf16 and f16 round to nearest even), for tokens
// and for state tensors alike.
std::string EncodeFloats(const float* data, int64_t count, WireType type);

}  // namespace lact

#endif  // LACT_COMMON_TOKEN_CODEC_H_
