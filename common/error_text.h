// What an error message quotes of text a caller or a file supplied: at
// most `max_bytes` of it, and its length when cut, so a message stays
// short however long the name, path or header it reports.
#ifndef LACT_COMMON_ERROR_TEXT_H_
#define LACT_COMMON_ERROR_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lact {

inline std::string ErrorQuote(absl::string_view text, size_t max_bytes = 64) {
  if (text.size() <= max_bytes) return std::string(text);
  return absl::StrCat(text.substr(0, max_bytes), "... (", text.size(), " bytes)");
}

}  // namespace lact

#endif  // LACT_COMMON_ERROR_TEXT_H_
