// TLS credentials made on the spot for a cluster on 127.0.0.1 (`lact local
// --tls`, the tests): a CA, and one certificate it signs for 127.0.0.1 and
// localhost that every process serves and shows as its client
// certificate; EC P-256 keys, valid 30 days. Written as PEM files into a
// folder (the key readable by its owner only).
#ifndef LACT_CLIENT_LOCAL_CREDENTIALS_H_
#define LACT_CLIENT_LOCAL_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"

namespace lact {

struct LocalCredentials {
  std::string ca_file, cert_file, key_file;
};

// INTERNAL if OpenSSL fails, naming the step; the files' errors name them.
absl::StatusOr<LocalCredentials> MakeLocalCredentials(const std::string& dir);

}  // namespace lact

#endif  // LACT_CLIENT_LOCAL_CREDENTIALS_H_
