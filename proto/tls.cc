#include "proto/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lact {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' is not a readable PEM file"));
  }
  return text.str();
}

absl::StatusOr<TlsFiles> TlsFilesFromFlags(const Flags& flags) {
  TlsFiles files;
  const std::string cert = flags.Get("tls-cert").value_or("");
  const std::string key = flags.Get("tls-key").value_or("");
  const std::string ca = flags.Get("tls-ca").value_or("");
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!cert.empty()) {
    LACT_ASSIGN_OR_RETURN(files.cert, ReadPem(cert, "--tls-cert"));
    LACT_ASSIGN_OR_RETURN(files.key, ReadPem(key, "--tls-key"));
  }
  if (!ca.empty()) {
    LACT_ASSIGN_OR_RETURN(files.ca, ReadPem(ca, "--tls-ca"));
  }
  return files;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, bool require_client_cert) {
  if (!files.serves_tls()) {
    if (require_client_cert) {
      return absl::InvalidArgumentError(
          "client certificates need TLS: give --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (require_client_cert) {
    if (files.ca.empty()) {
      return absl::InvalidArgumentError("verifying client certificates needs --tls-ca");
    }
    options.pem_root_certs = files.ca;
  }
  options.pem_key_cert_pairs.push_back({files.key, files.cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files) {
  return ChannelCredentialsFromPem(files.ca, files.cert, files.key);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFromPem(const std::string& roots,
                                                                    const std::string& cert,
                                                                    const std::string& key) {
  if (roots.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = roots;
  options.pem_cert_chain = cert;
  options.pem_private_key = key;
  return grpc::SslCredentials(options);
}

}  // namespace lact
