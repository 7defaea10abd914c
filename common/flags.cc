#include "common/flags.h"

#include <cstdio>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lact {

namespace {

absl::Status Unexpected(const std::string& arg, const std::set<std::string>& allowed,
                        const std::set<std::string>& switches) {
  if (!absl::StartsWith(arg, "-") || arg == "--") {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", arg, "' (flags are --name VALUE)"));
  }
  std::set<std::string> names = allowed;
  names.insert(switches.begin(), switches.end());
  return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg.substr(0, arg.find('=')),
                                                 " (allowed: --", absl::StrJoin(names, ", --"),
                                                 ")"));
}

}  // namespace

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::set<std::string>& allowed,
                                   const std::set<std::string>& repeatable,
                                   const std::set<std::string>& switches) {
  // A value-taking flag takes the next argument whatever it is, so only
  // the last argument can lack its value.
  if (!args.empty() && absl::StartsWith(args.back(), "--")) {
    const std::string last = args.back().substr(2);
    if (allowed.count(last) && !switches.count(last)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", last, " needs a value"));
    }
  }
  CLI::App app;
  app.set_help_flag();     // --help is each command's own (AnswerHelpOrVersion, the lact CLI)
  app.allow_extras(true);  // reported below, with the allowed names
  std::map<std::string, CLI::Option*> options;  // value-taking flags and switches
  for (const std::string& name : allowed) {
    if (switches.count(name)) continue;
    options[name] = app.add_option("--" + name)
                        ->type_size(1)
                        ->expected(1)
                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  for (const std::string& name : switches) options[name] = app.add_flag("--" + name);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's order
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (!app.remaining().empty()) return Unexpected(app.remaining().front(), allowed, switches);
  Flags flags;
  for (const auto& [name, option] : options) {
    if (option->count() == 0) continue;
    if (option->count() > 1 && !repeatable.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " given more than once"));
    }
    if (!switches.count(name)) {
      flags.values_[name] = option->results();
    } else if (option->as<bool>()) {
      flags.values_[name] = {"true"};
    }
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
