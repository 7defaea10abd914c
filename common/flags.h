// "--name VALUE" / "--name=VALUE" command lines for the lact subcommands and
// servers, parsed by CLI11: every flag takes one value except the named
// switches, which take none (a switch given "=false" counts as absent).
// Unknown flags (the message lists the allowed ones), stray arguments,
// missing values and repeats of a non-repeatable flag are INVALID_ARGUMENT
// naming the flag.
#ifndef LACT_COMMON_FLAGS_H_
#define LACT_COMMON_FLAGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lact {

class Flags {
 public:
  // `allowed`: flag names without dashes; `repeatable`: those that may repeat.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
                                     const std::set<std::string>& allowed,
                                     const std::set<std::string>& repeatable = {},
                                     const std::set<std::string>& switches = {});

  bool Has(const std::string& name) const { return values_.count(name) > 0; }

  std::optional<std::string> Get(const std::string& name) const;
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<std::string> Required(const std::string& name) const;
  // Integer flag within [min, max]; `fallback` when absent.
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback, int64_t min,
                              int64_t max) const;
  absl::StatusOr<std::optional<int64_t>> OptionalInt(const std::string& name, int64_t min,
                                                     int64_t max) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

// This build's version (the CMake project's, e.g. "1.0.0").
const char* LactVersion();

// For a server's main, before it parses its flags: with --help or -h among
// the arguments, prints `usage` to stdout and returns 0; with --version,
// prints "PROGRAM VERSION" and returns 0; nullopt otherwise.
std::optional<int> AnswerHelpOrVersion(int argc, char** argv, const char* program,
                                       const char* usage);

}  // namespace lact

#endif  // LACT_COMMON_FLAGS_H_
