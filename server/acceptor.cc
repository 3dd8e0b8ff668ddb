#include "server/acceptor.h"

#include <boost/asio/write.hpp>
#include <utility>

namespace sundial::server {

using tcp = asio::ip::tcp;

Acceptor::Acceptor(Loop* loop, Core* core, const char* cannot_listen, std::string refusal,
                   SessionFactory start_session)
    : core_(core),
      cannot_listen_(cannot_listen),
      refusal_(std::move(refusal)),
      start_session_(std::move(start_session)),
      acceptor_(loop->io()) {}

Status Acceptor::Start(const std::string& address, uint16_t port) {
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) return InvalidArgument("--bind: not an IP address");
  const tcp::endpoint endpoint(ip, port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable(cannot_listen_);
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return Status::Ok();
}

void Acceptor::Stop() {
  asio::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
}

void Acceptor::Accept() {
  // The socket is made on the io_context of the loop that will own it.
  Loop* loop = core_->NextLoop();
  acceptor_.async_accept(loop->io(), [this, loop](boost::system::error_code ec,
                                                  tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      if (core_->metrics()->connections() >=
          static_cast<int64_t>(core_->options().max_connections)) {
        Refuse(socket);
      } else {
        // The server joins the loops before it destroys the acceptors, so `this` outlives the
        // posted start.
        loop->Post([this, loop, socket = std::move(socket)]() mutable {
          start_session_(std::move(socket), loop);
        });
      }
    }
    Accept();
  });
}

void Acceptor::Refuse(tcp::socket& socket) {
  boost::system::error_code ignored;
  if (core_->tls() == nullptr) asio::write(socket, asio::buffer(refusal_), ignored);
  socket.close(ignored);
}

}  // namespace sundial::server
