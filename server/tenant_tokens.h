// Who calls the coordinator's public service. With a token file
// (--auth-tokens), every call must present one of its bearer tokens, and
// the token says the caller's tenant: a job belongs to the tenant that
// submitted it, and other tenants are told it does not exist. Without one
// (an open cluster, allowed on loopback only) every caller may see every
// job, and a job's tenant is what its JobSpec says. Immutable once made;
// safe from any thread.
#ifndef LACT_SERVER_TENANT_TOKENS_H_
#define LACT_SERVER_TENANT_TOKENS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace lact::server {

struct Caller {
  std::string tenant;
  bool any_tenant = false;  // an open cluster's caller: every job is theirs
  bool Owns(absl::string_view job_tenant) const { return any_tenant || job_tenant == tenant; }
};

class TenantTokens {
 public:
  // An open cluster: no tokens.
  TenantTokens() = default;
  // Lines "TENANT TOKEN" ('#' starts a comment line); a tenant name is
  // what JobSpec.tenant allows, a token at least kMinSecretBytes long and
  // unique. INVALID_ARGUMENT naming the line otherwise.
  static absl::StatusOr<TenantTokens> FromFile(const std::string& path);

  bool open() const { return tokens_.empty(); }
  // The caller of this call; UNAUTHENTICATED when tokens are required and
  // the call presents none or an unknown one.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context) const;

 private:
  std::vector<std::pair<std::string, std::string>> tokens_;  // (token, tenant)
};

// Whether `tenant` is a valid tenant name: at most 64 letters, digits,
// '-', '_' or '.'.
bool ValidTenantName(absl::string_view tenant);

}  // namespace lact::server

#endif  // LACT_SERVER_TENANT_TOKENS_H_
