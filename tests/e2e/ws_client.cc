#include "tests/e2e/ws_client.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>

namespace sundial::e2e {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

struct WsClient::Impl {
  Impl() : ws(io) {}

  // Starts one asynchronous operation and runs the io_context until it completes; past the
  // deadline the socket is closed (aborting it) and the result is timed_out.
  template <typename Start>
  error_code Run(Start&& start, int timeout_ms) {
    error_code result;
    bool done = false;
    start([&](error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    io.restart();
    io.run_for(std::chrono::milliseconds(timeout_ms));
    if (!done) {
      Close();
      io.restart();
      io.run();
      result = asio::error::timed_out;
    }
    return result;
  }

  void Close() {
    error_code ignored;
    ws.next_layer().close(ignored);
  }

  asio::io_context io;
  websocket::stream<asio::ip::tcp::socket> ws;
  websocket::response_type upgrade_response;
};

WsClient::WsClient() : impl_(std::make_unique<Impl>()) {}
WsClient::~WsClient() = default;

WsClient::error_code WsClient::Connect(uint16_t port,
                                       std::vector<std::pair<std::string, std::string>> headers,
                                       int timeout_ms) {
  error_code ec;
  const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
  impl_->ws.next_layer().connect(ep, ec);
  if (ec) return ec;
  impl_->ws.set_option(websocket::stream_base::decorator(
      [headers = std::move(headers)](websocket::request_type& req) {
        for (const auto& [k, v] : headers) req.set(k, v);
      }));
  impl_->ws.read_message_max(64u << 20);
  const std::string host = "127.0.0.1:" + std::to_string(port);
  return impl_->Run(
      [&](auto handler) {
        impl_->ws.async_handshake(impl_->upgrade_response, host, "/ws", handler);
      },
      timeout_ms);
}

int WsClient::status() const { return static_cast<int>(impl_->upgrade_response.result_int()); }

WsClient::error_code WsClient::SendBinary(std::string_view bytes, int timeout_ms) {
  impl_->ws.binary(true);
  return impl_->Run(
      [&](auto handler) {
        impl_->ws.async_write(asio::buffer(bytes.data(), bytes.size()), handler);
      },
      timeout_ms);
}

WsClient::error_code WsClient::SendText(std::string_view text, int timeout_ms) {
  impl_->ws.text(true);
  return impl_->Run(
      [&](auto handler) { impl_->ws.async_write(asio::buffer(text.data(), text.size()), handler); },
      timeout_ms);
}

std::optional<WsClient::Message> WsClient::Read(int timeout_ms, error_code* error) {
  beast::flat_buffer buffer;
  const error_code ec =
      impl_->Run([&](auto handler) { impl_->ws.async_read(buffer, handler); }, timeout_ms);
  if (error != nullptr) *error = ec;
  if (ec) return std::nullopt;
  Message m;
  m.text = impl_->ws.got_text();
  m.data = beast::buffers_to_string(buffer.data());
  return m;
}

void WsClient::Close() { impl_->Close(); }

bool WsClient::UpgradeDeclined(const error_code& ec) {
  return ec == websocket::error::upgrade_declined;
}

bool WsClient::TimedOut(const error_code& ec) { return ec == asio::error::timed_out; }

}  // namespace sundial::e2e
