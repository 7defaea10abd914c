#include "common/token_codec.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace lact {

int WireBytes(WireType type) { return type == WireType::kF32 ? 4 : 2; }

namespace {

constexpr struct {
  WireType type;
  const char* name;
} kWireTypeNames[] = {{WireType::kF32, "f32"}, {WireType::kBF16, "bf16"}, {WireType::kF16, "f16"}};

}  // namespace

const char* WireTypeName(WireType type) {
  for (const auto& [each, name] : kWireTypeNames) {
    if (each == type) return name;
  }
  return "?";
}

absl::StatusOr<WireType> WireTypeNamed(absl::string_view name, absl::string_view what) {
  for (const auto& [type, each] : kWireTypeNames) {
    if (name == each) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "' (allowed: f32, bf16, f16)"));
}

absl::Status CheckFinite(const float* values, int64_t count, int64_t width, int64_t first_token) {
  // A NaN or Inf has all exponent bits set; check them all in one pass.
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(values);
  uint32_t any = 0;
#pragma omp simd reduction(| : any)
  for (int64_t i = 0; i < count; ++i) any |= ((bits[i] & 0x7f800000u) == 0x7f800000u) ? 1u : 0u;
  if (any == 0) return absl::OkStatus();
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat("token ", first_token + i / width, " feature ",
                                                     i % width, " is ", values[i],
                                                     "; tokens must be finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeTokensInto(absl::string_view bytes, WireType type, int64_t width,
                              int64_t first_token, float* dst, int64_t capacity, int64_t* tokens) {
  const int64_t elem = WireBytes(type), row = elem * width;
  if (width < 1 || bytes.size() % row != 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", bytes.size(),
                                                   " bytes is not a whole number of ", width,
                                                   "-wide tokens of ", elem, " bytes per value"));
  }
  const int64_t count = static_cast<int64_t>(bytes.size()) / elem;
  if (count > capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk runs past token ", first_token + capacity / width));
  }
  const char* src = bytes.data();
  if (type == WireType::kF32) {
    std::memcpy(dst, src, count * sizeof(float));
  } else {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = type == WireType::kBF16 ? BFloat16ToFloat(v) : HalfToFloat(v);
    }
  }
  *tokens = count / width;
  return CheckFinite(dst, count, width, first_token);
}

absl::Status DecodeTokenPiecesInto(const std::vector<absl::string_view>& pieces, WireType type,
                                   int64_t width, int64_t first_token, float* dst, int64_t capacity,
                                   int64_t* tokens) {
  if (pieces.size() == 1)
    return DecodeTokensInto(pieces[0], type, width, first_token, dst, capacity, tokens);
  int64_t bytes = 0;
  for (absl::string_view p : pieces) bytes += static_cast<int64_t>(p.size());
  if (type != WireType::kF32) {
    std::string joined;
    joined.reserve(bytes);
    for (absl::string_view p : pieces) joined.append(p.data(), p.size());
    return DecodeTokensInto(joined, type, width, first_token, dst, capacity, tokens);
  }
  const int64_t row = 4 * width;
  if (width < 1 || bytes % row != 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", bytes,
                                                   " bytes is not a whole number of ", width,
                                                   "-wide tokens of 4 bytes per value"));
  }
  if (bytes / 4 > capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk runs past token ", first_token + capacity / width));
  }
  char* out = reinterpret_cast<char*>(dst);
  for (absl::string_view p : pieces) {
    std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
  *tokens = bytes / row;
  return CheckFinite(dst, bytes / 4, width, first_token);
}

std::string EncodeFloats(const float* data, int64_t count, WireType type) {
  if (type == WireType::kF32)
    return std::string(reinterpret_cast<const char*>(data), count * sizeof(float));
  std::string out(count * WireBytes(type), '\0');
  for (int64_t i = 0; i < count; ++i) {
    uint16_t v;
    if (type == WireType::kF16) {
      v = FloatToHalf(data[i]);
    } else {
      v = FloatToBFloat16(data[i]);
    }
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

}  // namespace lact
