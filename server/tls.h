// TLS for both of sundiald's ports (--tls-cert FILE, --tls-key FILE; docs/operations.md, "TLS").
//
// TlsContexts holds the server's current OpenSSL context (Asio's ssl::context): the certificate
// chain and the private key read from the two files, TLS 1.2 and 1.3 only, no compression, no
// renegotiation, forward-secret AEAD ciphers for TLS 1.2 and OpenSSL's TLS 1.3 defaults, at
// OpenSSL security level 2 at least. Reload() reads both files again (SIGHUP): on success new
// handshakes use the new context; connections already open keep the one they started with (each
// holds a reference); on failure the old context stays and the reason is returned.
//
// Thread safety: Current() and Reload() from any thread (one mutex, taken once per new
// connection and per reload). This header is free of Asio and OpenSSL: only server/*.cc that
// make TLS streams include <boost/asio/ssl.hpp>.
#pragma once

#include <memory>
#include <string>

#include "engine/mutex.h"
#include "engine/status.h"

namespace boost::asio::ssl {
class context;
}

namespace sundial::server {

class TlsContexts {
 public:
  TlsContexts(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}

  // Reads both files and makes the context new handshakes use. INVALID_ARGUMENT (saying which
  // file and why: missing, not PEM, key not matching the certificate) leaves the current one.
  Status Reload();
  // The context for a new connection (null before the first successful Reload).
  std::shared_ptr<boost::asio::ssl::context> Current() const;
  // One line for the log: the certificate's subject and expiry.
  std::string Describe() const;

  const std::string& cert_file() const { return cert_file_; }
  const std::string& key_file() const { return key_file_; }

 private:
  const std::string cert_file_;
  const std::string key_file_;
  mutable Mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> current_ GUARDED_BY(mu_);
  std::string description_ GUARDED_BY(mu_);
};

}  // namespace sundial::server
