// TLS probes for the end-to-end tests (tests/e2e/tls_test.cc): a bare handshake that reports the
// server's certificate (or why it was refused), HTTPS GET, and one wss request/reply. Every
// operation has a deadline. Asio's ssl and Beast stay in tls_client.cc.
#pragma once

#include <string>

namespace sundial::e2e {

struct TlsProbe {
  bool ok = false;
  std::string error;    // why the connection or handshake failed
  std::string peer_cn;  // the server certificate's common name, after a handshake
  std::string version;  // "TLSv1.3", ...
  std::string reply;    // HttpsGet: the whole response; WssRoundTrip: the reply message
};

// Connects to 127.0.0.1:port and shakes hands, verifying against `ca_file`. `max_version`:
// an OpenSSL protocol version (TLS1_1_VERSION...) to cap the client at, 0 for none; with a cap
// below 1.2 the client's own security level is lowered so that only the server can refuse.
TlsProbe TlsHandshake(unsigned short port, const std::string& ca_file, int max_version = 0,
                      int timeout_ms = 5'000);

// GET `path` over HTTPS (Connection: close); reply holds status line, headers and body.
TlsProbe HttpsGet(unsigned short port, const std::string& ca_file, const std::string& path,
                  int timeout_ms = 5'000);

// wss://127.0.0.1:port/ws: sends `text` as a text frame and reads one message.
TlsProbe WssRoundTrip(unsigned short port, const std::string& ca_file, const std::string& text,
                      int timeout_ms = 5'000);

}  // namespace sundial::e2e
