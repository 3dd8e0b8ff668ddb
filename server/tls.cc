#include "server/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl/context.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sundial::server {
namespace {

namespace ssl = boost::asio::ssl;

// TLS 1.2 suites: ECDHE (forward secrecy) with AEAD only, Mozilla's "intermediate" list without
// the DHE suites (which need parameters of our own). TLS 1.3 keeps OpenSSL's default suites, all
// of them AEAD.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// The reason of OpenSSL's last queued error (and clears the queue), or `fallback`.
std::string OpenSslReason(const boost::system::error_code& ec) {
  std::string reason;
  if (unsigned long e = ERR_peek_last_error(); e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    reason = buf;
  } else if (ec) {
    reason = ec.message();
  }
  ERR_clear_error();
  return reason.empty() ? "unknown OpenSSL error" : reason;
}

// A file that cannot be opened is named with errno's text (ENOENT and EACCES need different
// operator actions), before OpenSSL's less specific "system lib".
Status Readable(const std::string& flag, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status(Code::kInvalidArgument, flag + " " + path + ": " + std::strerror(errno));
  }
  std::fclose(f);
  return Status::Ok();
}

std::string DescribeCertificate(SSL_CTX* ctx) {
  X509* cert = SSL_CTX_get0_certificate(ctx);
  if (cert == nullptr) return "no certificate";
  char subject[256];
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
  std::string out = std::string("subject ") + subject + ", expires ";
  BIO* bio = BIO_new(BIO_s_mem());
  ASN1_TIME_print(bio, X509_get0_notAfter(cert));
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  out.append(data, static_cast<size_t>(n));
  BIO_free(bio);
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
    out += " (EXPIRED: clients will refuse it)";
  return out;
}

}  // namespace

Status TlsContexts::Reload() {
  if (Status s = Readable("--tls-cert", cert_file_); !s.ok()) return s;
  if (Status s = Readable("--tls-key", key_file_); !s.ok()) return s;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::no_compression | ssl::context::single_dh_use,
                   ec);
  // Belt and braces over the option bits: a minimum version is what OpenSSL 3 honours first.
  if (!ec && SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return Status(Code::kInvalidArgument, "TLS: cannot require TLS 1.2: " + OpenSslReason(ec));
  }
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // Level 2: RSA/DH keys of 2048 bits or more, no SHA-1 signatures, no RC4/3DES.
  if (SSL_CTX_get_security_level(native) < 2) SSL_CTX_set_security_level(native, 2);
  if (!ec && SSL_CTX_set_cipher_list(native, kTls12Ciphers) != 1) {
    return Status(Code::kInvalidArgument, "TLS: cannot set the cipher list: " + OpenSslReason(ec));
  }
  if (ec) {
    return Status(Code::kInvalidArgument, "TLS: " + OpenSslReason(ec));
  }
  ctx->use_certificate_chain_file(cert_file_, ec);
  if (ec) {
    return Status(
        Code::kInvalidArgument,
        "--tls-cert " + cert_file_ +
            ": not a PEM certificate chain (or one OpenSSL refuses): " + OpenSslReason(ec));
  }
  // The key is read on its own first, so that "not a key" and "not this certificate's key"
  // get different messages. A key with a passphrase is refused (no prompt: a daemon has no
  // terminal).
  EVP_PKEY* key = nullptr;
  if (std::FILE* f = std::fopen(key_file_.c_str(), "rb")) {
    key = PEM_read_PrivateKey(
        f, nullptr, [](char*, int, int, void*) { return 0; }, nullptr);
    std::fclose(f);
  }
  if (key == nullptr) {
    return Status(
        Code::kInvalidArgument,
        "--tls-key " + key_file_ +
            ": not a PEM private key (or one with a passphrase, which is not supported): " +
            OpenSslReason(ec));
  }
  const bool matches =
      SSL_CTX_use_PrivateKey(native, key) == 1 && SSL_CTX_check_private_key(native) == 1;
  EVP_PKEY_free(key);
  if (!matches) {
    return Status(Code::kInvalidArgument, "--tls-key " + key_file_ +
                                              ": does not match the certificate in --tls-cert " +
                                              cert_file_ + ": " + OpenSslReason(ec));
  }
  std::string description = DescribeCertificate(native);
  MutexLock lock(&mu_);
  current_ = std::move(ctx);
  description_ = std::move(description);
  return Status::Ok();
}

std::shared_ptr<ssl::context> TlsContexts::Current() const {
  MutexLock lock(&mu_);
  return current_;
}

std::string TlsContexts::Describe() const {
  MutexLock lock(&mu_);
  return description_;
}

}  // namespace sundial::server
