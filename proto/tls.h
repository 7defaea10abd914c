// TLS for lact's gRPC ports, from PEM files: every process may have a
// certificate chain and key of its own (served by its ports, and shown as
// a client certificate where a peer asks for one) and a CA bundle that
// signs its peers' certificates. Without a certificate a port is
// plaintext; without a CA a channel is. Certificates must name the
// addresses peers dial (an IP SAN for a worker's registered address).
#ifndef LACT_PROTO_TLS_H_
#define LACT_PROTO_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace lact {

struct TlsFiles {
  std::string cert, key;  // this process's certificate chain and private key (PEM)
  std::string ca;         // the CA certificates that sign its peers' (PEM)
  bool serves_tls() const { return !cert.empty(); }
};

// --tls-cert, --tls-key and --tls-ca, each a file path, checked to be
// readable (a cert needs its key, and the reverse): INVALID_ARGUMENT
// naming the flag otherwise.
absl::StatusOr<TlsFiles> TlsFilesFromFlags(const Flags& flags);

// The text of the PEM file at `path` (it must hold a "-----BEGIN " block);
// INVALID_ARGUMENT naming `flag` otherwise.
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag);

// A port's credentials: TLS with the certificate when there is one, else
// plaintext. With `require_client_cert`, a caller must show a certificate
// the CA signed (mutual TLS).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, bool require_client_cert);

// A channel's credentials: TLS verifying the server against the CA when
// there is one (presenting this process's certificate, if any), else
// plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files);

// The same from PEM text already read (roots "" = plaintext).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFromPem(const std::string& roots,
                                                                    const std::string& cert = "",
                                                                    const std::string& key = "");

}  // namespace lact

#endif  // LACT_PROTO_TLS_H_
