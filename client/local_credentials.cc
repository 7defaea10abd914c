#include "client/local_credentials.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lact {
namespace {

using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;

absl::Status Failed(const char* step) {
  return absl::InternalError(absl::StrCat("making local TLS credentials: ", step, " failed"));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return Failed("an X.509 extension");
  const bool added = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return added ? absl::OkStatus() : Failed("adding an X.509 extension");
}

// A certificate for `key` named `common_name`, signed by `issuer_key` as
// `issuer` (itself when null).
absl::StatusOr<Cert> MakeCert(EVP_PKEY* key, const char* common_name, X509* issuer,
                              EVP_PKEY* issuer_key, long serial, bool ca) {
  Cert cert(X509_new(), &X509_free);
  if (!cert || X509_set_version(cert.get(), 2) != 1) return Failed("X509_new");
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 30L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (ca) {
    LACT_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE"));
    LACT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign"));
  } else {
    LACT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_basic_constraints, "CA:FALSE"));
    LACT_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"));
    LACT_RETURN_IF_ERROR(
        AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return Failed("X509_sign");
  return cert;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Writes what `write` puts into a memory BIO to `path` with `mode`.
template <typename Write>
absl::Status WritePem(const std::string& path, mode_t mode, Write write) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  if (!bio || write(bio.get()) != 1) return Failed("PEM encoding");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  }
  const bool written = WriteAll(fd, data, static_cast<size_t>(size));
  close(fd);
  if (!written) return absl::DataLossError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LocalCredentials> MakeLocalCredentials(const std::string& dir) {
  Key ca_key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  Key key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  if (!ca_key || !key) return Failed("EC key generation");
  LACT_ASSIGN_OR_RETURN(Cert ca, MakeCert(ca_key.get(), "lact local CA", nullptr, ca_key.get(), 1,
                                          /*ca=*/true));
  LACT_ASSIGN_OR_RETURN(Cert cert, MakeCert(key.get(), "127.0.0.1", ca.get(), ca_key.get(), 2,
                                            /*ca=*/false));
  LocalCredentials files{dir + "/ca.pem", dir + "/cert.pem", dir + "/key.pem"};
  LACT_RETURN_IF_ERROR(
      WritePem(files.ca_file, 0644, [&](BIO* b) { return PEM_write_bio_X509(b, ca.get()); }));
  LACT_RETURN_IF_ERROR(
      WritePem(files.cert_file, 0644, [&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); }));
  LACT_RETURN_IF_ERROR(WritePem(files.key_file, 0600, [&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  }));
  return files;
}

}  // namespace lact
