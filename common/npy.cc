#include "common/npy.h"

#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/half.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace lact {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct NpyHeader {  // the header's dict
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Extracts the value text that follows 'key': in the Python dict literal.
bool FindValue(const std::string& dict, const std::string& key, std::string* value) {
  const size_t k = dict.find("'" + key + "'");
  if (k == std::string::npos) return false;
  size_t p = dict.find(':', k);
  if (p == std::string::npos) return false;
  ++p;
  while (p < dict.size() && dict[p] == ' ') ++p;
  size_t end = p;
  if (p < dict.size() && dict[p] == '(') {
    end = dict.find(')', p);
    if (end == std::string::npos) return false;
    ++end;
  } else if (p < dict.size() && dict[p] == '\'') {
    end = dict.find('\'', p + 1);
    if (end == std::string::npos) return false;
    ++end;
  } else {
    while (end < dict.size() && dict[end] != ',' && dict[end] != '}') ++end;
  }
  *value = dict.substr(p, end - p);
  return true;
}

absl::StatusOr<NpyHeader> ParseHeader(const std::string& path, const std::string& dict) {
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("npy '", path, "': ", what));
  };
  NpyHeader h;
  std::string descr, fortran, shape;
  if (!FindValue(dict, "descr", &descr) || !FindValue(dict, "fortran_order", &fortran) ||
      !FindValue(dict, "shape", &shape)) {
    return bad("header lacks descr, fortran_order or shape");
  }
  h.descr = std::string(absl::StripSuffix(absl::StripPrefix(descr, "'"), "'"));
  fortran = std::string(absl::StripAsciiWhitespace(fortran));
  if (fortran != "False" && fortran != "True") return bad("fortran_order must be True or False");
  h.fortran_order = fortran == "True";
  absl::string_view inner = absl::StripSuffix(absl::StripPrefix(shape, "("), ")");
  for (absl::string_view part : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return bad(absl::StrCat("shape ", shape, " is not a tuple of non-negative integers"));
    }
    h.shape.push_back(d);
  }
  return h;
}

}  // namespace

absl::StatusOr<NpyLayout> ParseNpyLayout(const std::string& path, const uint8_t* p, size_t n) {
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("npy '", path, "': ", what));
  };
  if (n < 10 || std::memcmp(p, kMagic, 6) != 0) return bad("not a .npy file (bad magic)");
  const int major = p[6];
  size_t header_len, start;
  if (major == 1) {
    header_len = p[8] | (p[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) return bad("truncated header");
    header_len = p[8] | (p[9] << 8) | (p[10] << 16) | (static_cast<size_t>(p[11]) << 24);
    start = 12;
  } else {
    return bad(absl::StrCat("unsupported format version ", major, " (allowed: 1, 2, 3)"));
  }
  if (start + header_len > n) return bad("truncated header");
  LACT_ASSIGN_OR_RETURN(
      NpyHeader h,
      ParseHeader(path, std::string(reinterpret_cast<const char*>(p + start), header_len)));
  if (h.fortran_order) return bad("Fortran-order arrays are not supported; save with C order");
  constexpr int64_t kMaxElements = int64_t{1} << 60;
  const int64_t elements = CheckedNumElements(h.shape, kMaxElements);
  if (elements < 0) {
    return bad(absl::StrCat("shape ", ShapeString(h.shape), " has more than 2^60 elements"));
  }
  return NpyLayout{h.descr, h.shape, elements, start + header_len};
}

std::string NpyHeaderBytes(const std::vector<int64_t>& shape, const std::string& descr) {
  std::string dims = "(";
  for (int64_t d : shape) absl::StrAppend(&dims, d, ",");
  if (shape.size() > 1) dims.pop_back();
  dims += ")";
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", dims, ", }");
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  const char version_and_len[4] = {1, 0, static_cast<char>(dict.size() & 0xff),
                                   static_cast<char>(dict.size() >> 8)};
  return absl::StrCat(absl::string_view(kMagic, 6), absl::string_view(version_and_len, 4), dict);
}

std::string NpyF32Header(const std::vector<int64_t>& shape) { return NpyHeaderBytes(shape, "<f4"); }

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  LACT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("npy '", path, "': ", what));
  };
  const uint8_t* p = file.data();
  LACT_ASSIGN_OR_RETURN(NpyLayout h, ParseNpyLayout(path, p, file.size()));
  size_t elem;
  if (h.descr == "<f4" || h.descr == "=f4")
    elem = 4;
  else if (h.descr == "<f2" || h.descr == "=f2")
    elem = 2;
  else
    return bad(
        absl::StrCat("dtype '", h.descr,
                     "' is not supported (allowed: little-endian float32 <f4, float16 <f2)"));
  const uint64_t payload = file.size() - h.data_offset,
                 need = static_cast<uint64_t>(h.elements) * elem;
  if (payload != need) {
    return bad(absl::StrCat("payload is ", payload, " bytes but shape ", ShapeString(h.shape),
                            " needs ", need, payload < need ? " (truncated?)" : ""));
  }
  Tensor t(h.shape);
  const uint8_t* src = p + h.data_offset;
  if (elem == 4) {
    if (payload > 0) std::memcpy(t.ptr(), src, payload);
  } else {
    for (int64_t i = 0; i < t.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      t.data[i] = HalfToFloat(v);
    }
  }
  return t;
}

absl::Status WriteNpy(const std::string& path, const Tensor& tensor) {
  const std::string header = NpyF32Header(tensor.shape);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(tensor.ptr()),
            static_cast<std::streamsize>(tensor.size() * 4));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("writing '", path, "' failed"));
  return absl::OkStatus();
}

}  // namespace lact
