#include "tests/e2e/tls_client.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <memory>
#include <sstream>

namespace sundial::e2e {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

std::unique_ptr<ssl::context> ClientContext(const std::string& ca_file, int max_version) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  ctx->set_verify_mode(ssl::verify_peer);
  ctx->load_verify_file(ca_file);
  if (max_version != 0) {
    SSL_CTX_set_security_level(ctx->native_handle(), 0);
    SSL_CTX_set_min_proto_version(ctx->native_handle(), 0);
    SSL_CTX_set_max_proto_version(ctx->native_handle(), max_version);
    SSL_CTX_set_cipher_list(ctx->native_handle(), "DEFAULT:@SECLEVEL=0");
  }
  return ctx;
}

void Describe(SSL* ssl, TlsProbe* probe) {
  probe->version = SSL_get_version(ssl);
  if (X509* cert = SSL_get1_peer_certificate(ssl)) {
    char cn[256] = {0};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    probe->peer_cn = cn;
    X509_free(cert);
  }
}

// Runs the io_context until `done` or the deadline (then closes `close` and drains).
template <typename Close>
bool RunUntil(asio::io_context& io, const bool& done,
              std::chrono::steady_clock::time_point deadline, Close&& close) {
  io.restart();
  while (!done && std::chrono::steady_clock::now() < deadline) io.run_one_until(deadline);
  if (done) return true;
  close();
  io.restart();
  io.run();
  return false;
}

std::string Why(const error_code& ec, SSL* ssl) {
  std::string out = ec.message();
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) out += std::string(": ") + X509_verify_cert_error_string(verify);
  return out;
}

}  // namespace

TlsProbe TlsHandshake(unsigned short port, const std::string& ca_file, int max_version,
                      int timeout_ms) {
  TlsProbe probe;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  asio::io_context io;
  auto ctx = ClientContext(ca_file, max_version);
  ssl::stream<tcp::socket> stream(io, *ctx);
  error_code ec;
  stream.next_layer().connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) {
    probe.error = "connect: " + ec.message();
    return probe;
  }
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(stream.native_handle()), "127.0.0.1");
  bool done = false;
  stream.async_handshake(ssl::stream_base::client, [&](const error_code& e) {
    ec = e;
    done = true;
  });
  if (!RunUntil(io, done, deadline, [&] { stream.next_layer().close(); })) {
    probe.error = "handshake timed out";
    return probe;
  }
  if (ec) {
    probe.error = "handshake: " + Why(ec, stream.native_handle());
    return probe;
  }
  Describe(stream.native_handle(), &probe);
  probe.ok = true;
  return probe;
}

TlsProbe HttpsGet(unsigned short port, const std::string& ca_file, const std::string& path,
                  int timeout_ms) {
  TlsProbe probe;
  asio::io_context io;
  auto ctx = ClientContext(ca_file, 0);
  beast::ssl_stream<beast::tcp_stream> stream(io, *ctx);
  beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(timeout_ms));
  error_code ec;
  beast::get_lowest_layer(stream).socket().connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) {
    probe.error = "connect: " + ec.message();
    return probe;
  }
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(stream.native_handle()), "127.0.0.1");
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  req.keep_alive(false);
  http::response<http::string_body> res;
  beast::flat_buffer buffer;
  stream.async_handshake(ssl::stream_base::client, [&](const error_code& e) {
    if (e) {
      ec = e;
      return;
    }
    Describe(stream.native_handle(), &probe);
    http::async_write(stream, req, [&](const error_code& e2, size_t) {
      if (e2) {
        ec = e2;
        return;
      }
      http::async_read(stream, buffer, res, [&](const error_code& e3, size_t) { ec = e3; });
    });
  });
  io.run();  // bounded by the tcp_stream's expiry
  if (ec) {
    probe.error = Why(ec, stream.native_handle());
    return probe;
  }
  std::ostringstream out;
  out << res;
  probe.reply = out.str();
  probe.ok = true;
  return probe;
}

TlsProbe WssRoundTrip(unsigned short port, const std::string& ca_file, const std::string& text,
                      int timeout_ms) {
  TlsProbe probe;
  asio::io_context io;
  auto ctx = ClientContext(ca_file, 0);
  websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws(io, *ctx);
  auto& lowest = beast::get_lowest_layer(ws);
  lowest.expires_after(std::chrono::milliseconds(timeout_ms));
  error_code ec;
  lowest.socket().connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) {
    probe.error = "connect: " + ec.message();
    return probe;
  }
  SSL* native = ws.next_layer().native_handle();
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(native), "127.0.0.1");
  beast::flat_buffer buffer;
  const std::string host = "127.0.0.1:" + std::to_string(port);
  ws.next_layer().async_handshake(ssl::stream_base::client, [&](const error_code& e) {
    if (e) {
      ec = e;
      return;
    }
    Describe(native, &probe);
    // From here the WebSocket's own timeouts (Beast's suggested client settings) and the
    // tcp_stream's expiry must not both apply.
    lowest.expires_never();
    websocket::stream_base::timeout t =
        websocket::stream_base::timeout::suggested(beast::role_type::client);
    t.handshake_timeout = std::chrono::milliseconds(timeout_ms);
    t.idle_timeout = std::chrono::milliseconds(timeout_ms);
    ws.set_option(t);
    ws.async_handshake(host, "/ws", [&](const error_code& e2) {
      if (e2) {
        ec = e2;
        return;
      }
      ws.text(true);
      ws.async_write(asio::buffer(text), [&](const error_code& e3, size_t) {
        if (e3) {
          ec = e3;
          return;
        }
        ws.async_read(buffer, [&](const error_code& e4, size_t) {
          ec = e4;
          if (!e4) probe.reply = beast::buffers_to_string(buffer.data());
          error_code ignored;
          lowest.socket().close(ignored);
          io.stop();  // the WebSocket's own timers would keep the run going
        });
      });
    });
  });
  io.run_for(std::chrono::milliseconds(timeout_ms * 2));
  if (ec || probe.reply.empty()) {
    probe.error = ec ? Why(ec, native) : "no reply";
    return probe;
  }
  probe.ok = true;
  return probe;
}

}  // namespace sundial::e2e
