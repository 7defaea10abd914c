#include "server/tenant_tokens.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/auth.h"

namespace lact::server {

bool ValidTenantName(absl::string_view tenant) {
  return tenant.size() <= 64 && std::all_of(tenant.begin(), tenant.end(), [](char ch) {
           return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                  ch == '.';
         });
}

absl::StatusOr<TenantTokens> TenantTokens::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the token file '", path, "'"));
  TenantTokens t;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file '", path, "' line ", number, ": ", what));
    };
    if (fields.size() != 2) return bad("want 'TENANT TOKEN'");
    if (fields[0].empty() || !ValidTenantName(fields[0])) {
      return bad("the tenant must be 1-64 letters, digits, '-', '_' or '.'");
    }
    if (fields[1].size() < kMinSecretBytes) {
      return bad(absl::StrCat("the token is ", fields[1].size(), " bytes; need at least ",
                              kMinSecretBytes));
    }
    for (const auto& [token, tenant] : t.tokens_) {
      if (token == fields[1]) return bad("the token is already given to tenant " + tenant);
    }
    t.tokens_.emplace_back(std::string(fields[1]), std::string(fields[0]));
  }
  if (t.tokens_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' lists no tokens"));
  }
  return t;
}

absl::StatusOr<Caller> TenantTokens::Authenticate(const grpc::ServerContextBase& context) const {
  if (open()) return Caller{"", true};
  const std::string presented = PresentedSecret(context);
  if (presented.empty()) {
    return absl::UnauthenticatedError(
        "this cluster needs a bearer token (authorization: Bearer TOKEN; lact --token-file)");
  }
  // Every token is compared, so the time taken does not say which matched.
  const std::string* tenant = nullptr;
  for (const auto& [token, name] : tokens_) {
    if (SecretsEqual(presented, token)) tenant = &name;
  }
  if (tenant == nullptr) return absl::UnauthenticatedError("the bearer token is not known here");
  return Caller{*tenant, false};
}

}  // namespace lact::server
