// The client side of TLS, shared by client.cc (binary TCP) and watch.cc (wss): a context that
// verifies the server (TLS 1.2+, the CA file or the system's CAs) and the per-connection setup
// (SNI, the host name or IP address the certificate must name). Included by client/*.cc only:
// it brings in Asio's ssl and OpenSSL.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <memory>
#include <string>

#include "client/result.h"

namespace sundial::client::tls {

// TLS 1.2 or later; the server's chain verified against `ca_file` (PEM), or the system's CAs
// when empty. INVALID_ARGUMENT (kLocal) when the file cannot be read.
inline Result<std::shared_ptr<boost::asio::ssl::context>> MakeContext(const std::string& ca_file) {
  namespace ssl = boost::asio::ssl;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::no_compression, ec);
  ctx->set_verify_mode(ssl::verify_peer, ec);
  if (ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec) {
      return Error::Local(Code::kInvalidArgument,
                          "tls: cannot load the system's CA certificates: " + ec.message());
    }
  } else {
    ctx->load_verify_file(ca_file, ec);
    if (ec) {
      return Error::Local(Code::kInvalidArgument,
                          "--ca-file " + ca_file + ": cannot load PEM CA certificates from it");
    }
  }
  return ctx;
}

// Before the handshake: the certificate must name `host` (a DNS name, or an IP address in its
// subjectAltName), and a DNS name goes in SNI.
inline void PrepareConnection(SSL* ssl, const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (!ec) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, host.c_str());
    SSL_set1_host(ssl, host.c_str());
  }
}

// Why a handshake failed, for people: the verification error when there was one (an unknown
// CA, a wrong host, an expired certificate), else OpenSSL's reason.
inline std::string HandshakeFailure(SSL* ssl, const boost::system::error_code& ec,
                                    const std::string& where) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return "tls: " + where +
           ": the server's certificate was refused: " + X509_verify_cert_error_string(verify);
  }
  return "tls: handshake with " + where + " failed: " + ec.message() +
         " (is TLS on at the server: --tls-cert?)";
}

}  // namespace sundial::client::tls
