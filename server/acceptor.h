// The listening side of every port (the binary TCP port, the HTTP port, and any added later):
// bind and listen, accept on the loop it was made on (loop 0), refuse past --max-connections,
// and hand each socket to the next loop, which owns the connection for life. The acceptor knows
// no transport: each port gives it the bytes a refused connection reads and a factory that
// starts its session, so transports include the acceptor and never the other way round.
//
// Refusal past --max-connections: a plain connection reads the port's refusal (a typed error
// frame, an HTTP 503) and is closed; under TLS it is closed before the handshake, since plain
// bytes would read as garbage to a TLS client.
//
// Included by server/*.cc only (Asio).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <string>

#include "server/internal.h"

namespace sundial::server {

class Acceptor final : public Listener {
 public:
  // Runs on `loop`, the connection's loop for life: nothing of the socket is touched from the
  // accepting thread again.
  using SessionFactory = std::function<void(asio::ip::tcp::socket socket, Loop* loop)>;

  // `cannot_listen`: the error's detail when the port cannot be listened on (a literal naming the
  // flag). `refusal`: what a plain connection past --max-connections reads.
  Acceptor(Loop* loop, Core* core, const char* cannot_listen, std::string refusal,
           SessionFactory start_session);

  Status Start(const std::string& address, uint16_t port) override;
  uint16_t port() const override { return port_; }
  void Stop() override;

 private:
  void Accept();
  void Refuse(asio::ip::tcp::socket& socket);

  Core* const core_;
  const char* const cannot_listen_;
  const std::string refusal_;
  const SessionFactory start_session_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
};

}  // namespace sundial::server
