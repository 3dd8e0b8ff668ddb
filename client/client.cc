// Client and AsyncClient over Boost.Asio. The blocking Client runs its own io_context on the
// caller's thread until the call's work is done or its deadline passes (Asio's
// blocking_tcp_client pattern); AsyncClient takes over a connected Client's socket and runs the
// same io_context on a background thread.
#include "client/client.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "client/tls_client.h"
#include "engine/mutex.h"
#include "protocol/framing.h"

namespace sundial::client {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr size_t kReadChunkBytes = 64 * 1024;

Error ReadFailure(const error_code& ec) {
  if (ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::ssl::error::stream_truncated) {
    return Error::Connection(Code::kUnavailable, "connection closed by the server");
  }
  return Error::Connection(Code::kUnavailable, "read: " + ec.message());
}

// Splits the bytes received on one connection into frames and hands each Response to
// `deliver`; EventMessages are skipped. Keeps a partial frame between calls.
class ResponseReader {
 public:
  // An Error when the connection must be closed: a protocol violation, or a Response with
  // request_id 0 (the server's answer to a request it could not read).
  template <typename Deliver>  // void(uint64_t request_id, Result<Reply>)
  std::optional<Error> Feed(const char* data, size_t n, const Deliver& deliver) {
    buffer_.append(data, n);
    std::optional<Error> failure;
    size_t offset = 0;
    while (!failure) {
      std::string_view frame;
      size_t consumed = 0;
      const protocol::FrameStatus status = protocol::NextFrame(
          std::string_view(buffer_).substr(offset), kMaxResponseFrameBytes, &frame, &consumed);
      if (status == protocol::FrameStatus::kIncomplete) break;
      if (status == protocol::FrameStatus::kEmpty) {
        failure = Error::Connection(Code::kInternal, "protocol: the server sent an empty frame");
        break;
      }
      if (status == protocol::FrameStatus::kTooLarge) {
        failure = Error::Connection(Code::kInternal, "protocol: the server sent a frame above " +
                                                         std::to_string(kMaxResponseFrameBytes) +
                                                         " bytes");
        break;
      }
      offset += consumed;
      failure = Handle(frame, deliver);
    }
    buffer_.erase(0, offset);
    return failure;
  }

 private:
  // `frame` points into buffer_ at any offset; FlatBuffers reads scalars in place, so the
  // frame is copied into its own string (8-byte aligned) before it is verified and read.
  template <typename Deliver>
  std::optional<Error> Handle(std::string_view frame, const Deliver& deliver) {
    std::string bytes(frame);
    if (!VerifyServerMessage(bytes)) {
      return Error::Connection(Code::kInternal,
                               "protocol: a frame from the server failed verification");
    }
    const auto* message = flatbuffers::GetRoot<protocol::ServerMessage>(bytes.data());
    if (message->body_type() == protocol::ServerBody::EventMessage) return std::nullopt;
    const protocol::Response* response = message->body_as_Response();
    if (response == nullptr) {
      return Error::Connection(Code::kInternal, "protocol: a frame from the server has no body");
    }
    const uint64_t request_id = response->request_id();
    Result<Reply> reply = Reply::FromVerified(std::move(bytes));
    if (request_id == 0) {
      if (!reply.ok()) return reply.error();
      return Error::Connection(Code::kInternal, "protocol: a response without a request_id");
    }
    deliver(request_id, std::move(reply));
    return std::nullopt;
  }

  std::string buffer_;
};

}  // namespace

// ---- Client ------------------------------------------------------------------------------

struct Client::Impl {
  asio::io_context io;
  tcp::socket socket{io};
  // With TLS: the stream over `socket` that reads and writes go through.
  std::shared_ptr<asio::ssl::context> tls_context;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  ResponseReader reader;
  std::array<char, kReadChunkBytes> chunk;
  int timeout_ms = kDefaultTimeoutMs;
  bool open = false;
  std::string closed_reason = "not connected";

  // Calls `f` with the stream to read and write: the TLS stream or the plain socket.
  template <typename F>
  void WithStream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(socket);
    }
  }

  void CloseSocket(std::string reason) {
    if (open) closed_reason = std::move(reason);
    open = false;
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  // Runs handlers until `done()` or the deadline. At the deadline, `cancel()` aborts what is
  // outstanding and the aborted handlers run. True when done in time.
  template <typename Done, typename Cancel>
  bool RunUntil(const Done& done, Clock::time_point deadline, const Cancel& cancel) {
    io.restart();
    while (!done()) {
      if (io.run_one_until(deadline) == 0) break;
    }
    if (done()) return true;
    cancel();
    io.restart();
    io.run();
    return false;
  }

  Result<void> Open(const Address& address, const ConnectOptions& options) {
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    const std::string where = address.ToString();
    const std::string timed_out =
        "cannot connect to " + where + ": timed out after " + std::to_string(timeout_ms) + " ms";

    tcp::resolver resolver(io);
    bool resolved = false;
    error_code ec;
    tcp::resolver::results_type endpoints;
    resolver.async_resolve(address.host, std::to_string(address.port),
                           [&](const error_code& e, tcp::resolver::results_type results) {
                             resolved = true;
                             ec = e;
                             endpoints = std::move(results);
                           });
    if (!RunUntil([&] { return resolved; }, deadline, [&] { resolver.cancel(); })) {
      return Error::Connection(Code::kUnavailable, timed_out);
    }
    if (ec) {
      return Error::Connection(Code::kUnavailable,
                               "cannot resolve " + address.host + ": " + ec.message());
    }

    bool connected = false;
    asio::async_connect(socket, endpoints, [&](const error_code& e, const tcp::endpoint&) {
      connected = true;
      ec = e;
    });
    if (!RunUntil([&] { return connected; }, deadline,
                  [&] {
                    error_code ignored;
                    socket.close(ignored);
                  })) {
      return Error::Connection(Code::kUnavailable, timed_out);
    }
    if (ec) {
      return Error::Connection(Code::kUnavailable,
                               "cannot connect to " + where + ": " + ec.message());
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (options.tls) {
      if (Result<void> shook = Handshake(address, options, deadline, timed_out); !shook.ok()) {
        socket.close(ignored);
        return shook;
      }
    }
    open = true;
    return {};
  }

  Result<void> Handshake(const Address& address, const ConnectOptions& options,
                         Clock::time_point deadline, const std::string& timed_out) {
    auto context = tls::MakeContext(options.ca_file);
    if (!context.ok()) return context.error();
    tls_context = std::move(*context);
    tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket, *tls_context);
    tls::PrepareConnection(tls->native_handle(),
                           options.server_name.empty() ? address.host : options.server_name);
    bool done = false;
    error_code ec;
    tls->async_handshake(asio::ssl::stream_base::client, [&](const error_code& e) {
      done = true;
      ec = e;
    });
    if (!RunUntil([&] { return done; }, deadline,
                  [&] {
                    error_code ignored;
                    socket.close(ignored);
                  })) {
      return Error::Connection(Code::kUnavailable, timed_out + " (TLS handshake)");
    }
    if (ec) {
      return Error::Connection(Code::kUnavailable,
                               tls::HandshakeFailure(tls->native_handle(), ec, address.ToString()));
    }
    return {};
  }

  // Writes `frames` and reads until every request in `calls` (request_id -> slot) has its
  // answer, the connection fails or the deadline passes; unanswered slots get the error. The
  // connection is closed on any failure.
  void Exchange(const std::string& frames,
                const std::unordered_map<uint64_t, std::optional<Result<Reply>>*>& calls,
                Clock::time_point deadline, int wait_ms) {
    size_t remaining = calls.size();
    std::optional<Error> failure;
    int outstanding = 0;
    auto deliver = [&](uint64_t request_id, Result<Reply> result) {
      auto it = calls.find(request_id);
      if (it == calls.end() || it->second->has_value()) return;  // not ours: skipped
      *it->second = std::move(result);
      --remaining;
    };
    auto fail = [&](Error e) {
      if (!failure) failure = std::move(e);
      CloseSocket(failure->message);
    };

    std::function<void()> read = [&] {
      ++outstanding;
      WithStream([&](auto& stream) {
        stream.async_read_some(asio::buffer(chunk), [&](const error_code& ec, size_t n) {
          --outstanding;
          if (ec) return fail(ReadFailure(ec));
          if (std::optional<Error> e = reader.Feed(chunk.data(), n, deliver)) return fail(*e);
          if (remaining > 0) read();
        });
      });
    };
    // A failed write leaves the socket open: the server may have answered and closed (an error
    // for the first request, then a close), and that answer is still to be read.
    ++outstanding;
    WithStream([&](auto& stream) {
      asio::async_write(stream, asio::buffer(frames), [&](const error_code& ec, size_t) {
        --outstanding;
        if (ec && !failure) {
          failure = Error::Connection(Code::kUnavailable, "write: " + ec.message());
        }
      });
    });
    read();

    RunUntil([&] { return outstanding == 0; }, deadline,
             [&] {
               failure = Error::Connection(Code::kUnavailable,
                                           "no answer from the server within " +
                                               std::to_string(timeout_ms + wait_ms) + " ms");
               CloseSocket(failure->message);
             });
    if (remaining == 0) return;
    if (!failure) failure = Error::Connection(Code::kUnavailable, "connection closed");
    if (open) CloseSocket(failure->message);
    for (const auto& [id, slot] : calls) {
      if (!slot->has_value()) *slot = *failure;
    }
  }
};

// ---- Following a primary -----------------------------------------------------------------

struct Client::Follow {
  std::vector<Address> seeds;  // as given
  ConnectOptions options;      // for each connection (the same token, TLS, timeout)
  bool on_primary = false;     // the connection is to the node that last said it is primary
  bool closed = false;         // Close() was called: no more connecting
  uint64_t highest_epoch = 0;  // the highest epoch a node has reported
  uint64_t resends = 0;
  uint64_t searches = 0;
  std::mt19937 rng{std::random_device{}()};
};

Client::Client(Address address, std::unique_ptr<Impl> impl)
    : address_(std::move(address)), impl_(std::move(impl)) {}

Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const Address& address, std::string token,
                                                int timeout_ms) {
  ConnectOptions options;
  options.token = std::move(token);
  options.timeout_ms = timeout_ms;
  return Connect(address, options);
}

Result<std::unique_ptr<Client>> Client::Connect(const Address& address,
                                                const ConnectOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->timeout_ms = options.timeout_ms;
  if (Result<void> opened = impl->Open(address, options); !opened.ok()) return opened.error();
  std::unique_ptr<Client> client(new Client(address, std::move(impl)));
  if (!options.token.empty()) {
    Result<Reply> auth = client->Call(BuildAuth({client->NextRequestId()}, options.token));
    if (!auth.ok()) {
      if (auth.error().origin != Error::Origin::kServer) return auth.error();
      return Error::Server(Code::kUnauthenticated, auth.error().message);
    }
  }
  return client;
}

uint64_t Client::NextRequestId() { return next_request_id_++; }

RequestHeader Client::NextHeader() { return {NextRequestId(), durability_}; }

bool Client::connected() const { return impl_->open; }

void Client::Close() {
  if (follow_ != nullptr) follow_->closed = true;
  impl_->CloseSocket("closed by the client");
}

uint64_t Client::resends() const { return follow_ ? follow_->resends : 0; }
uint64_t Client::primary_searches() const { return follow_ ? follow_->searches : 0; }

Result<std::unique_ptr<Client>> Client::Connect(const std::vector<Address>& addresses,
                                                const ConnectOptions& options) {
  if (addresses.empty()) {
    return Error::Local(Code::kInvalidArgument, "addresses: give at least one");
  }
  if (addresses.size() == 1) return Connect(addresses.front(), options);
  std::unique_ptr<Client> client(new Client(addresses.front(), std::make_unique<Impl>()));
  client->follow_ = std::make_unique<Follow>();
  client->follow_->seeds = addresses;
  client->follow_->options = options;
  Result<void> found = client->FindPrimary({});
  if (!found.ok() && !client->connected()) return found.error();
  return client;
}

namespace {

// Whether a Cluster answer comes from a node that is the primary (or from a node outside any
// cluster, which is its own primary).
bool AnswersAsPrimary(const protocol::ClusterResult& c) {
  if (c.cluster() == nullptr || c.cluster()->size() == 0) return true;
  return c.node() != nullptr && c.primary() != nullptr && c.primary()->size() > 0 &&
         c.node()->string_view() == c.primary()->string_view();
}

std::string Describe(const std::vector<Address>& addresses) {
  std::string out;
  for (const Address& a : addresses) out += (out.empty() ? "" : ", ") + a.ToString();
  return out;
}

}  // namespace

Result<void> Client::FindPrimary(const std::string& hint) {
  Follow& f = *follow_;
  ++f.searches;
  f.on_primary = false;
  // Asks the node at the other end of `candidate`'s connection; true when it is the primary.
  // Records where it says the primary is.
  std::vector<Address> order;
  auto add = [&order](const Address& a) {
    if (std::find(order.begin(), order.end(), a) == order.end()) order.push_back(a);
  };
  std::optional<Error> last;
  std::string no_primary;  // what the nodes that answered said
  auto ask = [&](Client& candidate) -> bool {
    Result<Reply> reply = candidate.CallOnce({BuildCluster(candidate.NextHeader())}).front();
    if (!reply.ok()) {
      last = reply.error();
      return false;
    }
    const protocol::ClusterResult* c = reply->result<protocol::ClusterResult>();
    if (c == nullptr) {
      last = Error::Connection(Code::kInternal,
                               "protocol: Cluster was not answered with a "
                               "ClusterResult by " +
                                   candidate.address().ToString());
      return false;
    }
    const bool primary = AnswersAsPrimary(*c) && c->epoch() >= f.highest_epoch;
    f.highest_epoch = std::max(f.highest_epoch, c->epoch());
    if (primary) return true;
    if (c->primary_addr() != nullptr && c->primary_addr()->size() > 0) {
      if (Result<Address> named = ParseAddress(c->primary_addr()->string_view()); named.ok()) {
        add(*named);
      }
    }
    if (no_primary.empty()) {
      const std::string node = c->node() ? c->node()->str() : candidate.address().ToString();
      no_primary = c->primary() && c->primary()->size() > 0
                       ? node + " names " + c->primary()->str() + " as primary (epoch " +
                             std::to_string(c->epoch()) + "), which is not answering as one"
                       : node + " knows no primary (epoch " + std::to_string(c->epoch()) +
                             "): an election is under way";
    }
    return false;
  };

  if (!hint.empty()) {
    if (Result<Address> named = ParseAddress(hint); named.ok()) add(*named);
  }
  // The node connected to first (no new connection), unless a node named another primary.
  const bool asked_current = impl_->open && hint.empty();
  if (asked_current) {
    if (ask(*this)) {
      f.on_primary = true;
      return {};
    }
  }
  for (const Address& a : f.seeds) add(a);

  ConnectOptions single = f.options;
  for (size_t k = 0; k < order.size(); ++k) {
    if (f.closed) break;
    if (asked_current && order[k] == address_) continue;
    Result<std::unique_ptr<Client>> candidate = Client::Connect(order[k], single);
    if (!candidate.ok()) {
      if (candidate.error().code == Code::kUnauthenticated) return candidate.error();
      last = candidate.error();
      continue;
    }
    const bool primary = ask(**candidate);
    if (primary || !impl_->open) {
      // The primary; or, while none is known, a node that answers (Cluster goes there).
      impl_ = std::move((*candidate)->impl_);
      address_ = (*candidate)->address_;
    }
    if (primary) {
      f.on_primary = true;
      return {};
    }
  }
  if (f.closed) return Error::Connection(Code::kUnavailable, "not connected: closed by the client");
  if (!no_primary.empty()) {
    return Error::Server(Code::kNotPrimary,
                         "not primary: no node answers as the primary: " + no_primary);
  }
  return Error::Connection(Code::kUnavailable,
                           "cannot reach any of " + Describe(f.seeds) +
                               (last ? " (last: " + last->message + ")" : std::string()));
}

RequestResend ResendRule(std::string_view request) {
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(request.data()), request.size());
  if (!protocol::VerifyRequestBuffer(verifier)) return RequestResend::kNotSafe;
  const protocol::Request* r = protocol::GetRequest(request.data());
  using O = protocol::Operation;
  switch (r->op_type()) {
    case O::Auth:
    case O::DeleteQueue:  // a repeat that follows a success is NOT_FOUND
    case O::Redrive:      // a repeat may move messages that errored again in between
    case O::Subscribe:
    case O::Unsubscribe:
    case O::Switchover:
    case O::DeleteSchedule:   // a repeat that follows a success is NOT_FOUND
    case O::TriggerSchedule:  // a repeat later is another fire (another T)
    case O::NONE:
      return RequestResend::kNotSafe;
    case O::Enqueue: {
      // Safe only when the server can tell a repeat from a new message: every item has an id.
      const protocol::Enqueue* e = r->op_as_Enqueue();
      if (e == nullptr || e->items() == nullptr) return RequestResend::kNotSafe;
      for (const protocol::EnqueueItem* item : *e->items()) {
        if (item->id() == nullptr || item->id()->size() == 0) return RequestResend::kNotSafe;
      }
      return RequestResend::kSafe;
    }
    default:
      // Reads; create/update/purge queue (a repeat leaves the same state); dequeue (a lease in
      // a lost answer expires: at least once); complete, fail, extend (with their tokens);
      // cancel, reprioritize; wait; cluster, stats, health; upsert, pause and resume of a
      // schedule (a repeat leaves the same state).
      return RequestResend::kSafe;
  }
}

std::vector<Result<Reply>> Client::CallFollowing(const std::vector<std::string>& requests) {
  Follow& f = *follow_;
  const auto start = Clock::now();
  const auto give_up = start + std::chrono::milliseconds(f.options.retry.budget_ms);
  int backoff_ms = std::max(1, f.options.retry.initial_backoff_ms);
  int attempts = 0;          // tries: searches that failed and sends
  bool sent_before = false;  // a send now is a resend

  struct Call {
    bool any_node = false;  // Cluster: whichever node is connected answers
    RequestResend resend = RequestResend::kNotSafe;
  };
  std::vector<Call> calls(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    calls[i].resend = ResendRule(requests[i]);
    flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(requests[i].data()),
                                   requests[i].size());
    calls[i].any_node =
        protocol::VerifyRequestBuffer(verifier) &&
        protocol::GetRequest(requests[i].data())->op_type() == protocol::Operation::Cluster;
  }
  std::vector<std::optional<Result<Reply>>> out(requests.size());
  std::vector<size_t> todo(requests.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::string hint;  // where a node said the primary is

  // Waits before the next try; false when the budget is spent (no more tries).
  auto wait = [&]() -> bool {
    const auto now = Clock::now();
    if (now >= give_up || f.closed) return false;
    std::uniform_int_distribution<int> jitter(backoff_ms / 2, backoff_ms);
    const auto pause =
        std::min<Clock::duration>(std::chrono::milliseconds(jitter(f.rng)), give_up - now);
    std::this_thread::sleep_for(pause);
    backoff_ms = std::min(backoff_ms * 2, std::max(1, f.options.retry.max_backoff_ms));
    return true;
  };
  // The calls still to do end with `e`, or (none given) each with the last error it got; the
  // message says that the budget is spent.
  auto give_up_with = [&](const std::optional<Error>& e) {
    const std::string why =
        " (gave up following the primary after " + std::to_string(attempts) + " tries in " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) +
        " ms)";
    for (size_t i : todo) {
      Error last = e ? *e : out[i]->error();
      last.message += why;
      out[i] = std::move(last);
    }
  };

  while (!todo.empty()) {
    if (f.closed) {
      for (size_t i : todo) {
        out[i] = Error::Connection(Code::kUnavailable, "not connected: closed by the client");
      }
      break;
    }
    bool needs_primary = false;
    for (size_t i : todo) needs_primary |= !calls[i].any_node;
    if (!impl_->open || (needs_primary && !f.on_primary)) {
      Result<void> found = FindPrimary(hint);
      hint.clear();
      if (!found.ok() && (needs_primary || !impl_->open)) {
        if (found.error().code == Code::kUnauthenticated) {
          for (size_t i : todo) out[i] = found.error();
          break;
        }
        ++attempts;
        if (!wait()) {
          give_up_with(found.error());
          break;
        }
        continue;
      }
    }
    std::vector<std::string> batch;
    batch.reserve(todo.size());
    for (size_t i : todo) batch.push_back(requests[i]);
    if (sent_before) f.resends += batch.size();
    sent_before = true;
    std::vector<Result<Reply>> results = CallOnce(batch);
    ++attempts;
    std::vector<size_t> again;
    bool redirected = false;
    for (size_t k = 0; k < todo.size(); ++k) {
      const size_t i = todo[k];
      Result<Reply>& r = results[k];
      bool retry = false;
      if (!r.ok()) {
        const Error& e = r.error();
        if (e.code == Code::kNotPrimary) {
          // Refused before anything was applied: always sent again, where the node says.
          retry = true;
          f.on_primary = false;
          if (!e.primary.empty() && e.primary != address_.ToString()) {
            hint = e.primary;
            redirected = true;
          }
        } else if (e.code == Code::kUnavailable && e.origin != Error::Origin::kLocal) {
          // A lost connection, a timeout, or the server's UNAVAILABLE (a demoted primary's
          // held replies; no synchronous standby in time): the outcome is unknown.
          f.on_primary = false;
          retry = calls[i].resend == RequestResend::kSafe;
        }
      }
      if (retry) again.push_back(i);
      out[i] = std::move(r);
    }
    if (again.empty()) break;
    todo = std::move(again);
    // A redirect to a named primary goes at once; anything else waits its turn.
    if (redirected && Clock::now() < give_up) continue;
    if (!wait()) {
      give_up_with(std::nullopt);
      break;
    }
  }
  std::vector<Result<Reply>> results;
  results.reserve(out.size());
  for (auto& r : out) results.push_back(std::move(*r));
  return results;
}

Result<Reply> Client::Call(std::string_view request) {
  return std::move(CallAll({std::string(request)}).front());
}

Result<Reply> Client::Call(const flatbuffers::FlatBufferBuilder& finished_request) {
  return Call(std::string_view(reinterpret_cast<const char*>(finished_request.GetBufferPointer()),
                               finished_request.GetSize()));
}

std::vector<Result<Reply>> Client::CallAll(const std::vector<std::string>& requests) {
  if (follow_ == nullptr) return CallOnce(requests);
  return CallFollowing(requests);
}

std::vector<Result<Reply>> Client::CallOnce(const std::vector<std::string>& requests) {
  std::vector<std::optional<Result<Reply>>> slots(requests.size());
  std::unordered_map<uint64_t, std::optional<Result<Reply>>*> calls;
  std::string frames;
  uint32_t wait_ms = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::optional<RequestSummary> summary = SummarizeRequest(requests[i]);
    if (!summary) {
      slots[i] = Error::Local(Code::kInvalidArgument, "request: not a valid Request FlatBuffer");
    } else if (summary->request_id == 0) {
      slots[i] = Error::Local(Code::kInvalidArgument, "request_id: 0 is reserved");
    } else if (!calls.emplace(summary->request_id, &slots[i]).second) {
      slots[i] =
          Error::Local(Code::kInvalidArgument,
                       "request_id: " + std::to_string(summary->request_id) + " appears twice");
    } else {
      wait_ms = std::max(wait_ms, summary->wait_ms);
      protocol::AppendFrame(requests[i], &frames);
    }
  }
  if (!calls.empty()) {
    if (!impl_->open) {
      for (auto& [id, slot] : calls) {
        *slot = Error::Connection(Code::kUnavailable, "not connected: " + impl_->closed_reason);
      }
    } else {
      const Clock::time_point deadline =
          Clock::now() + std::chrono::milliseconds(int64_t{impl_->timeout_ms} + wait_ms);
      impl_->Exchange(frames, calls, deadline, static_cast<int>(wait_ms));
    }
  }
  std::vector<Result<Reply>> out;
  out.reserve(slots.size());
  for (auto& slot : slots) out.push_back(std::move(*slot));
  return out;
}

Result<Reply> Client::CreateQueue(std::string_view name, const QueueSettings& s) {
  return Call(BuildCreateQueue(NextHeader(), name, s));
}
Result<Reply> Client::UpdateQueue(std::string_view name, const QueueSettingsUpdate& u) {
  return Call(BuildUpdateQueue(NextHeader(), name, u));
}
Result<Reply> Client::GetQueue(std::string_view name) {
  return Call(BuildGetQueue(NextHeader(), name));
}
Result<Reply> Client::ListQueues() { return Call(BuildListQueues(NextHeader())); }
Result<Reply> Client::DeleteQueue(std::string_view name) {
  return Call(BuildDeleteQueue(NextHeader(), name));
}
Result<Reply> Client::PurgeQueue(std::string_view name, const std::vector<MessageState>& states) {
  return Call(BuildPurgeQueue(NextHeader(), name, states));
}
Result<Reply> Client::Enqueue(std::string_view queue, const std::vector<EnqueueItem>& items,
                              uint32_t wait_ms) {
  if (follow_ != nullptr &&
      std::any_of(items.begin(), items.end(), [](const EnqueueItem& i) { return i.id.empty(); })) {
    // An id of the client's own: a resent enqueue is then a duplicate, not a second message.
    std::vector<EnqueueItem> with_ids = items;
    for (EnqueueItem& item : with_ids) {
      if (item.id.empty()) item.id = NewMessageId();
    }
    return Call(BuildEnqueue(NextHeader(), queue, with_ids, wait_ms));
  }
  return Call(BuildEnqueue(NextHeader(), queue, items, wait_ms));
}
Result<Reply> Client::Dequeue(std::string_view queue, const DequeueOptions& o) {
  return Call(BuildDequeue(NextHeader(), queue, o));
}
Result<Reply> Client::Complete(std::string_view queue, const std::vector<CompleteItem>& items) {
  return Call(BuildComplete(NextHeader(), queue, items));
}
Result<Reply> Client::CompleteAndNext(std::string_view queue,
                                      const std::vector<CompleteItem>& items,
                                      const DequeueOptions& next) {
  return Call(BuildCompleteAndNext(NextHeader(), queue, items, next));
}
Result<Reply> Client::Fail(std::string_view queue, std::string_view id, uint64_t lease_token,
                           const FailOptions& o) {
  return Call(BuildFail(NextHeader(), queue, id, lease_token, o));
}
Result<Reply> Client::Extend(std::string_view queue, std::string_view id, uint64_t lease_token,
                             int64_t lease_ms) {
  return Call(BuildExtend(NextHeader(), queue, id, lease_token, lease_ms));
}
Result<Reply> Client::SetKeyLimits(std::string_view queue, std::string_view value,
                                   const KeyLimits& limits) {
  return Call(BuildSetKeyLimits(NextHeader(), queue, value, limits));
}
Result<Reply> Client::GetKeyLimits(std::string_view queue, std::string_view value) {
  return Call(BuildGetKeyLimits(NextHeader(), queue, value));
}
Result<Reply> Client::ListKeys(std::string_view queue, protocol::KeyOrder order, uint32_t limit) {
  return Call(BuildListKeys(NextHeader(), queue, order, limit));
}

Result<Reply> Client::History(std::string_view queue, std::string_view id) {
  return Call(BuildHistory(NextHeader(), queue, id));
}
Result<Reply> Client::Note(std::string_view queue, std::string_view id, uint64_t lease_token,
                           std::string_view text) {
  return Call(BuildNote(NextHeader(), queue, id, lease_token, text));
}
Result<Reply> Client::Cancel(std::string_view queue, const std::vector<std::string>& ids) {
  return Call(BuildCancel(NextHeader(), queue, ids));
}
Result<Reply> Client::CancelByFilter(std::string_view queue, const Pairs& filter) {
  return Call(BuildCancelByFilter(NextHeader(), queue, filter));
}
Result<Reply> Client::Reprioritize(std::string_view queue, std::string_view id,
                                   const ReprioritizeChange& change) {
  return Call(BuildReprioritize(NextHeader(), queue, id, change));
}
Result<Reply> Client::ReprioritizeByFilter(std::string_view queue, const Pairs& filter,
                                           const ReprioritizeChange& change) {
  return Call(BuildReprioritizeByFilter(NextHeader(), queue, filter, change));
}
Result<Reply> Client::Redrive(std::string_view queue, const std::vector<std::string>& ids) {
  return Call(BuildRedrive(NextHeader(), queue, ids));
}
Result<Reply> Client::RedriveAll(std::string_view queue) {
  return Call(BuildRedriveAll(NextHeader(), queue));
}
Result<Reply> Client::RedriveByFilter(std::string_view queue, const Pairs& filter) {
  return Call(BuildRedriveByFilter(NextHeader(), queue, filter));
}
Result<Reply> Client::Get(std::string_view queue, std::string_view id,
                          bool include_dependency_results) {
  return Call(BuildGet(NextHeader(), queue, id, include_dependency_results));
}
Result<Reply> Client::Browse(std::string_view queue, const BrowseOptions& o) {
  return Call(BuildBrowse(NextHeader(), queue, o));
}
Result<Reply> Client::Count(std::string_view queue, const Pairs& filter) {
  return Call(BuildCount(NextHeader(), queue, filter));
}
Result<Reply> Client::Explain(std::string_view queue, std::string_view id) {
  return Call(BuildExplain(NextHeader(), queue, id));
}
Result<Reply> Client::ExplainFilter(std::string_view queue, const Pairs& filter) {
  return Call(BuildExplainFilter(NextHeader(), queue, filter));
}
Result<Reply> Client::EnqueueFlow(const std::vector<FlowNode>& roots) {
  if (follow_ == nullptr) return Call(BuildEnqueueFlow(NextHeader(), roots));
  std::vector<FlowNode> with_ids = roots;
  std::vector<std::vector<FlowNode>*> pending = {&with_ids};
  while (!pending.empty()) {
    std::vector<FlowNode>* nodes = pending.back();
    pending.pop_back();
    for (FlowNode& node : *nodes) {
      if (node.item.id.empty()) node.item.id = NewMessageId();
      pending.push_back(&node.children);
    }
  }
  return Call(BuildEnqueueFlow(NextHeader(), with_ids));
}

Result<Reply> Client::CreateBatch(std::string_view id, const CreateBatchOptions& o) {
  return Call(BuildCreateBatch(NextHeader(), id, o));
}

Result<Reply> Client::SealBatch(std::string_view id) {
  return Call(BuildSealBatch(NextHeader(), id));
}

Result<Reply> Client::GetBatch(std::string_view id) {
  return Call(BuildGetBatch(NextHeader(), id));
}

Result<Reply> Client::Wait(std::string_view queue, const std::vector<std::string>& ids,
                           uint32_t wait_ms) {
  return Call(BuildWait(NextHeader(), queue, ids, wait_ms));
}
Result<Reply> Client::UpsertSchedule(std::string_view queue, std::string_view name,
                                     const ScheduleTemplate& t) {
  return Call(BuildUpsertSchedule(NextHeader(), queue, name, t));
}
Result<Reply> Client::GetSchedule(std::string_view queue, std::string_view name) {
  return Call(BuildGetSchedule(NextHeader(), queue, name));
}
Result<Reply> Client::ListSchedules(std::string_view queue) {
  return Call(BuildListSchedules(NextHeader(), queue));
}
Result<Reply> Client::DeleteSchedule(std::string_view queue, std::string_view name) {
  return Call(BuildDeleteSchedule(NextHeader(), queue, name));
}
Result<Reply> Client::PauseSchedule(std::string_view queue, std::string_view name) {
  return Call(BuildPauseSchedule(NextHeader(), queue, name));
}
Result<Reply> Client::ResumeSchedule(std::string_view queue, std::string_view name) {
  return Call(BuildResumeSchedule(NextHeader(), queue, name));
}
Result<Reply> Client::TriggerSchedule(std::string_view queue, std::string_view name) {
  return Call(BuildTriggerSchedule(NextHeader(), queue, name));
}
Result<Reply> Client::Stats() { return Call(BuildStats(NextHeader())); }
Result<Reply> Client::Health() { return Call(BuildHealth(NextHeader())); }
Result<Reply> Client::Cluster() { return Call(BuildCluster(NextHeader())); }
Result<Reply> Client::Switchover(std::string_view to) {
  return Call(BuildSwitchover(NextHeader(), to));
}

// ---- AsyncClient -------------------------------------------------------------------------

struct AsyncClient::Impl {
  explicit Impl(std::unique_ptr<Client::Impl> connection, uint64_t first_request_id)
      : conn(std::move(connection)),
        work(asio::make_work_guard(conn->io)),
        next_request_id(first_request_id) {}

  std::unique_ptr<Client::Impl> conn;  // io_context, socket, reader: I/O thread only
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::thread thread;
  std::thread::id io_thread_id;  // set once, before the client is handed out
  std::atomic<uint64_t> next_request_id;
  std::atomic<size_t> in_flight{0};

  Mutex mu;
  bool closed GUARDED_BY(mu) = false;  // once set, nothing more is posted
  Mutex join_mu;

  // I/O thread only.
  std::unordered_map<uint64_t, Callback> pending;
  std::string outbound;  // frames waiting for the write in progress
  std::string writing;   // frames being written
  bool write_in_progress = false;

  void Finish(Callback& callback, Result<Reply> result) {
    in_flight.fetch_sub(1, std::memory_order_relaxed);
    callback(std::move(result));
  }

  // Fails every pending call with `error` and closes the socket. I/O thread.
  void Shutdown(const Error& error) {
    conn->CloseSocket(error.message);
    auto calls = std::move(pending);
    pending.clear();
    for (auto& [id, callback] : calls) Finish(callback, error);
  }

  // I/O thread.
  void OnSend(uint64_t request_id, std::string frame, Callback callback) {
    if (!conn->open) {
      return Finish(callback,
                    Error::Connection(Code::kUnavailable, "not connected: " + conn->closed_reason));
    }
    auto [it, inserted] = pending.try_emplace(request_id, std::move(callback));
    if (!inserted) {
      return Finish(callback, Error::Local(Code::kInvalidArgument,
                                           "request_id: " + std::to_string(request_id) +
                                               " is already in flight"));
    }
    outbound += frame;
    if (!write_in_progress) StartWrite();
  }

  void StartWrite() {
    write_in_progress = true;
    writing.swap(outbound);
    outbound.clear();
    conn->WithStream([this](auto& stream) {
      asio::async_write(stream, asio::buffer(writing), [this](const error_code& ec, size_t) {
        write_in_progress = false;
        if (ec) {
          if (conn->open) {
            Shutdown(Error::Connection(Code::kUnavailable, "write: " + ec.message()));
          }
          return;
        }
        if (!outbound.empty() && conn->open) StartWrite();
      });
    });
  }

  void StartRead() {
    conn->WithStream([this](auto& stream) { ReadFrom(stream); });
  }

  template <typename Stream>
  void ReadFrom(Stream& stream) {
    stream.async_read_some(asio::buffer(conn->chunk), [this](const error_code& ec, size_t n) {
      if (ec) {
        if (conn->open) Shutdown(ReadFailure(ec));
        return;
      }
      auto deliver = [this](uint64_t request_id, Result<Reply> result) {
        auto it = pending.find(request_id);
        if (it == pending.end()) return;  // not in flight: skipped
        Callback callback = std::move(it->second);
        pending.erase(it);
        Finish(callback, std::move(result));
      };
      if (std::optional<Error> e = conn->reader.Feed(conn->chunk.data(), n, deliver)) {
        return Shutdown(*e);
      }
      StartRead();
    });
  }
};

AsyncClient::AsyncClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AsyncClient::~AsyncClient() { Close(); }

Result<std::unique_ptr<AsyncClient>> AsyncClient::Connect(const Address& address, std::string token,
                                                          int timeout_ms) {
  ConnectOptions options;
  options.token = std::move(token);
  options.timeout_ms = timeout_ms;
  return Connect(address, options);
}

Result<std::unique_ptr<AsyncClient>> AsyncClient::Connect(const Address& address,
                                                          const ConnectOptions& options) {
  Result<std::unique_ptr<Client>> client = Client::Connect(address, options);
  if (!client.ok()) return client.error();
  auto impl = std::make_unique<Impl>(std::move((*client)->impl_), (*client)->next_request_id_);
  Impl* raw = impl.get();
  raw->conn->io.restart();
  asio::post(raw->conn->io, [raw] { raw->StartRead(); });
  raw->thread = std::thread([raw] { raw->conn->io.run(); });
  raw->io_thread_id = raw->thread.get_id();
  return std::unique_ptr<AsyncClient>(new AsyncClient(std::move(impl)));
}

Result<std::unique_ptr<AsyncClient>> AsyncClient::Connect(const std::vector<Address>& addresses,
                                                          const ConnectOptions& options) {
  if (addresses.size() == 1) return Connect(addresses.front(), options);
  Result<std::unique_ptr<Client>> client = Client::Connect(addresses, options);
  if (!client.ok()) return client.error();
  // Health goes to the primary: it returns once the client is on it (or the budget is spent).
  if (Result<Reply> health = (*client)->Health(); !health.ok()) return health.error();
  return Connect((*client)->address(), options);
}

uint64_t AsyncClient::NextRequestId() {
  return impl_->next_request_id.fetch_add(1, std::memory_order_relaxed);
}

size_t AsyncClient::in_flight() const { return impl_->in_flight.load(std::memory_order_relaxed); }

void AsyncClient::Send(std::string request, Callback callback) {
  std::optional<Error> refused;
  uint64_t request_id = 0;
  const std::optional<RequestSummary> summary = SummarizeRequest(request);
  if (!summary) {
    refused = Error::Local(Code::kInvalidArgument, "request: not a valid Request FlatBuffer");
  } else if (summary->request_id == 0) {
    refused = Error::Local(Code::kInvalidArgument, "request_id: 0 is reserved");
  } else {
    request_id = summary->request_id;
  }
  std::string frame;
  if (!refused) {
    frame.reserve(protocol::kFrameHeaderBytes + request.size());
    protocol::AppendFrame(request, &frame);
  }

  Impl* impl = impl_.get();
  ReleasableMutexLock lock(&impl->mu);
  if (impl->closed) {
    lock.Release();
    callback(Error::Connection(Code::kUnavailable, "not connected: closed by the client"));
    return;
  }
  if (!refused && impl->in_flight.load(std::memory_order_relaxed) >= kMaxInFlight) {
    refused = Error::Local(Code::kResourceExhausted,
                           "in flight: at most " + std::to_string(kMaxInFlight) + " calls");
  }
  impl->in_flight.fetch_add(1, std::memory_order_relaxed);
  asio::post(impl->conn->io, [impl, request_id, refused = std::move(refused),
                              frame = std::move(frame), callback = std::move(callback)]() mutable {
    if (refused) return impl->Finish(callback, std::move(*refused));
    impl->OnSend(request_id, std::move(frame), std::move(callback));
  });
}

void AsyncClient::Close() {
  Impl* impl = impl_.get();
  {
    MutexLock lock(&impl->mu);
    if (!impl->closed) {
      impl->closed = true;
      asio::post(impl->conn->io, [impl] {
        if (impl->conn->open) {
          impl->Shutdown(Error::Connection(Code::kUnavailable, "closed by the client"));
        }
      });
      impl->work.reset();
    }
  }
  if (impl->io_thread_id == std::this_thread::get_id()) return;  // from a callback
  MutexLock lock(&impl->join_mu);
  if (impl->thread.joinable()) impl->thread.join();
}

}  // namespace sundial::client
