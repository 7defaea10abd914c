// Bearer secrets on lact's gRPC calls. A client's channel adds
// "authorization: Bearer SECRET" to every call it makes (a tenant's token
// to the coordinator; the cluster secret between the coordinator and its
// workers); a server reads the secret back and compares it in constant
// time. Secrets live in files (a Kubernetes Secret mounted as one), never
// on a command line. Stateless functions; safe from any thread.
#ifndef LACT_PROTO_AUTH_H_
#define LACT_PROTO_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lact {

inline constexpr char kAuthorizationKey[] = "authorization";

// Shortest secret accepted from a file: 16 bytes of text.
inline constexpr size_t kMinSecretBytes = 16;

// A channel to `address` whose calls present `secret` (none when empty),
// with keepalive (keepalive.h).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                           const grpc::ChannelArguments& args,
                                           const std::string& secret);

// The secret a call presents ("" when it has no bearer authorization).
std::string PresentedSecret(const grpc::ServerContextBase& context);

// Whether `a` equals `b`, in time that depends only on their lengths.
bool SecretsEqual(absl::string_view a, absl::string_view b);

// UNAUTHENTICATED unless the call presents `secret`; OK when `secret` is
// empty (no secret configured). `what` names the secret in the error.
absl::Status CheckSecret(const grpc::ServerContextBase& context, const std::string& secret,
                         absl::string_view what);

// A secret read from a file: its first line, without surrounding blanks;
// INVALID_ARGUMENT if it is shorter than kMinSecretBytes, NOT_FOUND if the
// file cannot be read.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// `bytes` random bytes from the kernel as hex digits: a new secret (32
// bytes) or an unguessable name (16 bytes, 128 bits).
std::string RandomHex(size_t bytes);

// Whether `host` (as given to --host) is a loopback address, where lact
// processes may run without secrets.
bool IsLoopbackHost(absl::string_view host);

}  // namespace lact

#endif  // LACT_PROTO_AUTH_H_
