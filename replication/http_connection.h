// HttpConnection: one blocking HTTP/1.1 client connection to one etcd endpoint, with a
// deadline on every operation (internal to replication/: EtcdClient and Watch use it).
//
// It runs a private io_context on the calling thread until the operation completes or its
// deadline passes (Asio's blocking_tcp_client pattern, as client/client.cc does); a timed-out
// or failed connection is closed and the next operation reconnects. Keep-alive: after a
// complete reply that allows it, the connection stays open for the next request. A request
// on a reused connection that fails before any byte of the reply (the server had closed the
// idle connection) is sent once more on a fresh connection: it was never read by the server.
//
// Streaming replies (the watch): StartStream sends the request and reads the reply's header;
// ReadStream then returns the body as it arrives. Interrupt() may be called from any thread:
// the operation in progress (or the next one) returns UNAVAILABLE "interrupted" promptly.
//
// Asio and Beast stay in http_connection.cc (pimpl).
//
// Thread safety: one thread at a time, except Interrupt().
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "replication/etcd_client.h"

namespace sundial::replication {

struct HttpReply {
  int status = 0;
  std::string body;
  EtcdClock::time_point sent;  // when the request's first byte was handed to the socket
};

class HttpConnection {
 public:
  HttpConnection(EtcdEndpoint endpoint, size_t max_body_bytes);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // POSTs `body` (JSON) to `target` and reads the whole reply, by `deadline`. Errors are
  // UNAVAILABLE (unreachable, timed out, closed, interrupted; in_doubt once the request was
  // written), INTERNAL (not HTTP) or RESOURCE_EXHAUSTED (body over the limit).
  EtcdResult<HttpReply> Post(std::string_view target, std::string_view body,
                             EtcdClock::time_point deadline);

  // POSTs and reads the reply's status line and header by `deadline`; the body follows through
  // ReadStream. Returns the HTTP status.
  EtcdResult<int> StartStream(std::string_view target, std::string_view body,
                              EtcdClock::time_point deadline);
  // Appends what arrives of the streamed body to `out` (at least one byte unless the body
  // ended), waiting at most until `deadline` (EtcdClock::time_point::max(): no limit). Returns
  // false when the body ended.
  EtcdResult<bool> ReadStream(std::string& out, EtcdClock::time_point deadline);

  // Thread-safe: makes the operation in progress, and every later one, return "interrupted".
  void Interrupt();
  // Closes the socket (the next operation reconnects).
  void Close();

  const EtcdEndpoint& endpoint() const;
  // "etcd http://127.0.0.1:2379 /v3/kv/range": the start of this connection's messages.
  std::string Describe(std::string_view target) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sundial::replication
