#include "common/flags.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lact {

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::set<std::string>& allowed,
                                   const std::set<std::string>& repeatable,
                                   const std::set<std::string>& switches) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags are --name VALUE)"));
    }
    std::string name = arg.substr(2), value;
    if (switches.count(name)) {
      value = "true";
    } else if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    if (!allowed.count(name) && !switches.count(name)) {
      std::vector<std::string> names(allowed.begin(), allowed.end());
      names.insert(names.end(), switches.begin(), switches.end());
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (allowed: --",
                                                     absl::StrJoin(names, ", --"), ")"));
    }
    if (flags.values_.count(name) && !repeatable.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " given more than once"));
    }
    flags.values_[name].push_back(value);
  }
  return flags;
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.front();
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<std::string> Flags::Required(const std::string& name) const {
  std::optional<std::string> v = Get(name);
  if (!v) return absl::InvalidArgumentError(absl::StrCat("missing required flag --", name));
  return *v;
}

absl::StatusOr<std::optional<int64_t>> Flags::OptionalInt(const std::string& name, int64_t min,
                                                          int64_t max) const {
  std::optional<std::string> v = Get(name);
  if (!v) return std::optional<int64_t>();
  int64_t x;
  if (!absl::SimpleAtoi(*v, &x) || x < min || x > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " '", *v, "' must be an integer in [", min, ", ", max, "]"));
  }
  return std::optional<int64_t>(x);
}

absl::StatusOr<int64_t> Flags::Int(const std::string& name, int64_t fallback, int64_t min,
                                   int64_t max) const {
  absl::StatusOr<std::optional<int64_t>> v = OptionalInt(name, min, max);
  if (!v.ok()) return v.status();
  return v->value_or(fallback);
}

const char* LactVersion() { return LACT_VERSION; }

std::optional<int> AnswerHelpOrVersion(int argc, char** argv, const char* program,
                                       const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("%s %s\n", program, LactVersion());
      return 0;
    }
  }
  return std::nullopt;
}

}  // namespace lact
