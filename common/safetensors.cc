#include "common/safetensors.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/error_text.h"
#include "common/half.h"
#include "common/safetensors_out.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace lact {
namespace {

using json = nlohmann::json;

// Headers larger than this are rejected before parsing (safetensors' own limit).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF64:
      return 8;
  }
  return 0;
}

bool ParseDType(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "F16")
    *out = DType::kF16;
  else if (s == "BF16")
    *out = DType::kBF16;
  else if (s == "F64")
    *out = DType::kF64;
  else
    return false;
  return true;
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

template <typename T>
T Element(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return static_cast<T>(f);
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return static_cast<T>(d);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return static_cast<T>(HalfToFloat(h));
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return static_cast<T>(BFloat16ToFloat(b));
    }
  }
  return T();
}

absl::Status EntryError(const std::string& path, const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors '", path, "': tensor '", ErrorQuote(name), "': ", what));
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF64:
      return "F64";
  }
  return "?";
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  LACT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  return FromMapped(std::move(file), kMaxHeaderBytes);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromMapped(MappedFile file,
                                                            uint64_t max_header_bytes) {
  const std::string path = file.path();
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors '", path, "': ", what));
  };
  if (file.size() < 8) return bad("file is shorter than the 8-byte header length (truncated?)");
  const uint64_t header_len = ReadLe64(file.data());
  if (header_len > max_header_bytes) {
    return bad(absl::StrCat("header length ", header_len, " is over the ", max_header_bytes,
                            " bytes this file may have"));
  }
  if (header_len > file.size() - 8) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the file size ", file.size(),
                            " (truncated?)"));
  }
  std::string header(reinterpret_cast<const char*>(file.data() + 8), header_len);
  SafetensorsFile st(std::move(file), 8 + header_len);
  LACT_RETURN_IF_ERROR(st.ParseHeader(header));
  return st;
}

namespace {

// One tensor's header entry, checked against a data section of
// `data_size` bytes.
absl::StatusOr<TensorEntry> ParseEntry(const std::string& path, const std::string& name,
                                       const json& v, size_t data_size) {
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    return EntryError(path, name, "needs dtype, shape and data_offsets");
  }
  TensorEntry e;
  if (!v["dtype"].is_string() || !ParseDType(v["dtype"].get<std::string>(), &e.dtype)) {
    return EntryError(path, name,
                      absl::StrCat("unsupported dtype ", ErrorQuote(v["dtype"].dump()),
                                   " (allowed: F32, F16, BF16, F64)"));
  }
  if (!v["shape"].is_array()) return EntryError(path, name, "shape must be an array");
  uint64_t numel = 1;
  for (const json& d : v["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) {
      return EntryError(path, name, "shape entries must be non-negative integers");
    }
    e.shape.push_back(d.get<int64_t>());
    numel *= d.get<uint64_t>();
    if (numel > (1ull << 40)) return EntryError(path, name, "too many elements");
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return EntryError(path, name, "data_offsets must be two non-negative integers");
  }
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return EntryError(path, name,
                      absl::StrCat("data_offsets [", begin, ", ", end, ") outside the ", data_size,
                                   "-byte data section (truncated file?)"));
  }
  if (end - begin != numel * DTypeSize(e.dtype)) {
    return EntryError(
        path, name,
        absl::StrCat("has ", end - begin, " bytes but shape ", ShapeString(e.shape), " of ",
                     DTypeName(e.dtype), " needs ", numel * DTypeSize(e.dtype)));
  }
  e.offset = begin;
  e.nbytes = end - begin;
  return e;
}

}  // namespace

absl::Status SafetensorsFile::ParseHeader(const std::string& header) {
  const std::string& path = file_.path();
  json root = json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors '", path, "': header is not a JSON object"));
  }
  const size_t data_size = file_.size() - data_start_;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return EntryError(path, name, "must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return EntryError(path, name, "values must be strings");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    LACT_ASSIGN_OR_RETURN(entries_[name], ParseEntry(path, name, v, data_size));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<BasicTensor<T>> SafetensorsFile::Read(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("safetensors '", file_.path(), "': no tensor '", ErrorQuote(name), "'"));
  }
  const TensorEntry& e = it->second;
  BasicTensor<T> t(e.shape);
  const uint8_t* src = file_.data() + data_start_ + e.offset;
  const size_t step = DTypeSize(e.dtype);
  for (int64_t i = 0; i < t.size(); ++i) t.data[i] = Element<T>(e.dtype, src + i * step);
  return t;
}

absl::StatusOr<Tensor> SafetensorsFile::ReadFloat(const std::string& name) const {
  return Read<float>(name);
}
absl::StatusOr<TensorD> SafetensorsFile::ReadDouble(const std::string& name) const {
  return Read<double>(name);
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  std::vector<SafetensorsOut::Planned> planned;
  for (const auto& [name, t] : tensors_) planned.push_back({name, t->shape});
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsOut> out,
                        SafetensorsOut::Create(path, metadata_, planned));
  for (const auto& [name, t] : tensors_) LACT_RETURN_IF_ERROR(out->Write(name, *t));
  return out->Finish();
}

}  // namespace lact
