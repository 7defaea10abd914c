#include "proto/auth.h"

#include <sys/random.h>

#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "proto/keepalive.h"

namespace lact {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

// Adds the authorization header to each call's initial metadata.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string& header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthorizationKey, header_});
    }
    methods->Proceed();
  }

 private:
  const std::string header_;
};

class BearerInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& secret)
      : header_(absl::StrCat(kBearer, secret)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(header_);
  }

 private:
  const std::string header_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                           const grpc::ChannelArguments& args,
                                           const std::string& secret) {
  grpc::ChannelArguments with_keepalive = args;
  SetKeepalive(&with_keepalive);
  if (secret.empty()) return grpc::CreateCustomChannel(address, creds, with_keepalive);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerInterceptorFactory>(secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, with_keepalive,
                                                                 std::move(interceptors));
}

std::string PresentedSecret(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) return "";
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, kBearer)) return "";
  return std::string(value);
}

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Status CheckSecret(const grpc::ServerContextBase& context, const std::string& secret,
                         absl::string_view what) {
  if (secret.empty()) return absl::OkStatus();
  const std::string presented = PresentedSecret(context);
  if (presented.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("this call needs ", what, " (authorization: Bearer ...); it presented none"));
  }
  if (!SecretsEqual(presented, secret)) {
    return absl::UnauthenticatedError(absl::StrCat("the call's bearer secret is not ", what));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::NotFoundError(absl::StrCat("cannot read a secret from '", path, "'"));
  }
  std::string secret(absl::StripAsciiWhitespace(line));
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the secret in '", path, "' is ", secret.size(),
                                                   " bytes; need at least ", kMinSecretBytes));
  }
  return secret;
}

std::string RandomHex(size_t count) {
  std::string bytes(count, '\0');
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = getrandom(bytes.data() + done, bytes.size() - done, 0);
    if (n > 0) done += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(bytes);
}

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
}

}  // namespace lact
