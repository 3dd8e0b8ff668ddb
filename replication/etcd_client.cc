#include "replication/etcd_client.h"

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <charconv>

#include "replication/etcd_json.h"
#include "replication/http_connection.h"

namespace sundial::replication {
namespace {

namespace bj = boost::json;

constexpr std::chrono::milliseconds kMinAttempt{100};

template <typename T>
bool Failed(const json::Decoded<T>& d) {
  return std::holds_alternative<json::DecodeError>(d);
}

EtcdError Invalid(std::string message) {
  return {Code::kInvalidArgument, std::move(message), false};
}

}  // namespace

// ---- Errors, endpoints --------------------------------------------------------------------

Status EtcdError::status() const {
  switch (code) {
    case Code::kOk:
      return Status::Ok();
    case Code::kInvalidArgument:
      return {code, "etcd refused the request"};
    case Code::kNotFound:
      return {code, "etcd: no such lease"};
    case Code::kAlreadyExists:
      return {code, "etcd: already exists"};
    case Code::kFailedPrecondition:
      return {code, "etcd: revision compacted or not yet reached"};
    case Code::kResourceExhausted:
      return {code, "etcd: over a limit"};
    case Code::kUnavailable:
      return {code, "etcd unavailable"};
    case Code::kUnauthenticated:
      return {code, "etcd wants authentication"};
    case Code::kInternal:
      return {code, "etcd: malformed reply"};
    case Code::kNotPrimary:  // never etcd's: a node's answer
      return {Code::kInternal, "etcd: malformed reply"};
  }
  return {Code::kInternal, "etcd error"};
}

std::string EtcdError::ToString() const {
  std::string s(CodeName(code));
  s += ": ";
  s += message;
  return s;
}

std::string EtcdEndpoint::url() const {
  if (host.find(':') != std::string::npos) {
    return "http://[" + host + "]:" + std::to_string(port);
  }
  return "http://" + host + ":" + std::to_string(port);
}

EtcdResult<std::vector<EtcdEndpoint>> ParseEtcdEndpoints(std::string_view list) {
  std::vector<EtcdEndpoint> endpoints;
  while (true) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    const std::string original(item);
    auto bad = [&](std::string_view why) {
      return Invalid("etcd endpoint '" + original + "': " + std::string(why));
    };
    if (item.starts_with("https://")) return bad("https is not supported");
    if (item.starts_with("http://")) item.remove_prefix(7);
    if (item.ends_with("/")) item.remove_suffix(1);
    if (item.empty()) return bad("empty");
    if (item.find('/') != std::string_view::npos) return bad("a path is not allowed");
    EtcdEndpoint e;
    std::string_view port;
    if (item.front() == '[') {  // [v6]:port
      const size_t close = item.find(']');
      if (close == std::string_view::npos) return bad("unclosed '['");
      e.host = std::string(item.substr(1, close - 1));
      std::string_view rest = item.substr(close + 1);
      if (!rest.empty()) {
        if (rest.front() != ':') return bad("expected ':' after ']'");
        port = rest.substr(1);
        if (port.empty()) return bad("empty port");
      }
    } else {
      const size_t colon = item.rfind(':');
      if (colon != std::string_view::npos && item.find(':') != colon) {
        return bad("an IPv6 address needs brackets");
      }
      e.host = std::string(item.substr(0, colon));
      if (colon != std::string_view::npos) {
        port = item.substr(colon + 1);
        if (port.empty()) return bad("empty port");
      }
    }
    if (e.host.empty()) return bad("no host");
    if (!port.empty()) {
      unsigned value = 0;
      const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
      if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
        return bad("bad port");
      }
      e.port = static_cast<uint16_t>(value);
    }
    endpoints.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return endpoints;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

TxnOp TxnOp::Put(std::string key, std::string value, int64_t lease) {
  return {Kind::kPut, std::move(key), {}, std::move(value), lease};
}
TxnOp TxnOp::Delete(std::string key) { return {Kind::kDelete, std::move(key), {}, {}, 0}; }
TxnOp TxnOp::DeletePrefix(std::string prefix) {
  std::string end = PrefixRangeEnd(prefix);
  return {Kind::kDelete, std::move(prefix), std::move(end), {}, 0};
}
TxnOp TxnOp::Get(std::string key) { return {Kind::kRange, std::move(key), {}, {}, 0}; }
TxnOp TxnOp::GetPrefix(std::string prefix) {
  std::string end = PrefixRangeEnd(prefix);
  return {Kind::kRange, std::move(prefix), std::move(end), {}, 0};
}

// ---- The client ---------------------------------------------------------------------------

struct EtcdClient::Impl {
  EtcdClientOptions options;
  std::vector<std::unique_ptr<HttpConnection>> connections;  // one per endpoint, lazily open
  size_t current = 0;

  explicit Impl(EtcdClientOptions o) : options(std::move(o)) {
    for (const EtcdEndpoint& e : options.endpoints) {
      connections.push_back(std::make_unique<HttpConnection>(e, options.max_response_bytes));
    }
  }

  std::chrono::milliseconds AttemptTimeout() const {
    if (options.attempt_timeout.count() > 0) return options.attempt_timeout;
    const auto share =
        options.call_timeout / static_cast<int64_t>(std::max<size_t>(1, options.endpoints.size()));
    return std::max(kMinAttempt, share);
  }

  // What a successful call returns: the reply's object and when its request was sent.
  struct Reply {
    bj::object object;
    EtcdClock::time_point sent;
    HttpConnection* connection;
  };

  // POSTs `body` to `path` on the current endpoint, then the others in turn, until one
  // answers with etcd JSON or the deadline passes.
  EtcdResult<Reply> Call(std::string_view path, const bj::object& body, Deadline deadline) {
    if (connections.empty()) return Invalid("etcd: no endpoints configured");
    const auto until = deadline.at.value_or(EtcdClock::now() + options.call_timeout);
    const std::string text = bj::serialize(body);
    std::string failures;
    bool in_doubt = false;
    size_t tried = 0;
    for (; tried < connections.size(); ++tried) {
      const auto now = EtcdClock::now();
      if (now >= until) break;
      const size_t index = (current + tried) % connections.size();
      HttpConnection& connection = *connections[index];
      const auto attempt_until = std::min(until, now + AttemptTimeout());
      auto reply = connection.Post(path, text, attempt_until);
      auto note = [&](const std::string& message) {
        if (!failures.empty()) failures += "; ";
        failures += message;
      };
      if (!reply.ok()) {
        in_doubt = in_doubt || reply.error().in_doubt;
        if (reply.error().code != Code::kUnavailable) return reply.error();
        note(reply.error().message);
        continue;
      }
      const std::string where = connection.Describe(path);
      auto parsed = json::ParseObject(reply->body);
      if (Failed(parsed)) {
        if (reply->status >= 500) {  // a proxy's or a dying server's page: try elsewhere
          note(where + ": HTTP " + std::to_string(reply->status));
          in_doubt = true;
          connection.Close();
          continue;
        }
        return EtcdError{Code::kInternal,
                         where + ": malformed reply (HTTP " + std::to_string(reply->status) +
                             "): " + std::get<json::DecodeError>(parsed).what,
                         true};
      }
      bj::object object = std::get<bj::object>(std::move(parsed));
      if (auto error = json::FindError(object)) {
        std::string message = where + ": " + error->message;
        if (json::GrpcCodeTriesNextEndpoint(error->grpc_code)) {
          in_doubt = true;  // "request timed out" may still commit
          note(message);
          continue;
        }
        return EtcdError{json::CodeOfGrpc(error->grpc_code), std::move(message), false};
      }
      if (reply->status != 200) {
        return EtcdError{Code::kInternal,
                         where + ": HTTP " + std::to_string(reply->status) + " without an error",
                         true};
      }
      current = index;
      return Reply{std::move(object), reply->sent, &connection};
    }
    std::string message;
    if (tried == connections.size()) {
      message = tried == 1
                    ? failures
                    : "etcd: all " + std::to_string(tried) + " endpoints failed: " + failures;
    } else {
      message = "etcd: the deadline passed after trying " + std::to_string(tried) + " of " +
                std::to_string(connections.size()) + " endpoints";
      if (!failures.empty()) message += ": " + failures;
    }
    return EtcdError{Code::kUnavailable, std::move(message), in_doubt};
  }

  // Decodes a reply with `decode`, turning a mismatch into INTERNAL naming the endpoint.
  template <typename T, typename Decode>
  EtcdResult<T> DecodeWith(const Reply& reply, std::string_view path, const Decode& decode) {
    auto decoded = decode(reply.object);
    if (Failed(decoded)) {
      return EtcdError{Code::kInternal,
                       reply.connection->Describe(path) +
                           ": malformed reply: " + std::get<json::DecodeError>(decoded).what,
                       true};
    }
    return std::get<T>(std::move(decoded));
  }
};

EtcdClient::EtcdClient(EtcdClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

EtcdClient::~EtcdClient() = default;

const std::vector<EtcdEndpoint>& EtcdClient::endpoints() const { return impl_->options.endpoints; }

const EtcdEndpoint& EtcdClient::current_endpoint() const {
  static const EtcdEndpoint kNone{};
  if (impl_->connections.empty()) return kNone;
  return impl_->connections[impl_->current]->endpoint();
}

std::vector<EtcdEndpoint> EtcdClient::PreferredEndpoints() const {
  std::vector<EtcdEndpoint> out;
  const size_t n = impl_->connections.size();
  for (size_t i = 0; i < n; ++i) {
    out.push_back(impl_->connections[(impl_->current + i) % n]->endpoint());
  }
  return out;
}

EtcdResult<Lease> EtcdClient::GrantLease(int64_t ttl_seconds, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/lease/grant";
  bj::object body;
  body["TTL"] = std::to_string(ttl_seconds);
  auto reply = impl_->Call(kPath, body, deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<Lease>(*reply, kPath, [](const bj::object& o) -> json::Decoded<Lease> {
    Lease lease;
    auto header = json::DecodeHeader(o);
    if (Failed(header)) return std::get<json::DecodeError>(header);
    auto id = json::Int64Field(o, "ID");
    if (Failed(id)) return std::get<json::DecodeError>(id);
    auto ttl = json::Int64Field(o, "TTL");
    if (Failed(ttl)) return std::get<json::DecodeError>(ttl);
    lease.header = std::get<ResponseHeader>(header);
    lease.id = std::get<int64_t>(id);
    lease.ttl_seconds = std::get<int64_t>(ttl);
    if (lease.id == 0) return json::DecodeError{"ID: missing"};
    return lease;
  });
}

EtcdResult<LeaseRenewal> EtcdClient::KeepAliveOnce(int64_t lease_id, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/lease/keepalive";
  bj::object body;
  body["ID"] = std::to_string(lease_id);
  // A streaming RPC through the gateway: one request in the body, one {"result": ...} out,
  // then the stream ends. A lease that is gone answers with a result without a TTL.
  auto reply = impl_->Call(kPath, body, deadline);
  if (!reply.ok()) return reply.error();
  auto renewal = impl_->DecodeWith<LeaseRenewal>(
      *reply, kPath, [](const bj::object& o) -> json::Decoded<LeaseRenewal> {
        const bj::value* result = o.if_contains("result");
        if (result == nullptr || !result->is_object()) return json::DecodeError{"result: missing"};
        LeaseRenewal renewal;
        auto header = json::DecodeHeader(result->as_object());
        if (Failed(header)) return std::get<json::DecodeError>(header);
        auto ttl = json::Int64Field(result->as_object(), "TTL");
        if (Failed(ttl)) return std::get<json::DecodeError>(ttl);
        renewal.header = std::get<ResponseHeader>(header);
        renewal.ttl_seconds = std::get<int64_t>(ttl);
        return renewal;
      });
  if (!renewal.ok()) return renewal;
  if (renewal->ttl_seconds <= 0) {
    return EtcdError{Code::kNotFound,
                     reply->connection->Describe(kPath) + ": lease " + std::to_string(lease_id) +
                         " not found (expired or revoked)",
                     false};
  }
  renewal->sent = reply->sent;
  return renewal;
}

EtcdResult<ResponseHeader> EtcdClient::RevokeLease(int64_t lease_id, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/lease/revoke";
  bj::object body;
  body["ID"] = std::to_string(lease_id);
  auto reply = impl_->Call(kPath, body, deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<ResponseHeader>(*reply, kPath, json::DecodeHeader);
}

EtcdResult<PutResult> EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease,
                                      Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/put";
  auto reply = impl_->Call(kPath, json::EncodePut(key, value, lease), deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<PutResult>(*reply, kPath,
                                      [](const bj::object& o) -> json::Decoded<PutResult> {
                                        auto header = json::DecodeHeader(o);
                                        if (Failed(header))
                                          return std::get<json::DecodeError>(header);
                                        return PutResult{std::get<ResponseHeader>(header)};
                                      });
}

EtcdResult<RangeResult> EtcdClient::Get(std::string_view key, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/range";
  auto reply = impl_->Call(kPath, json::EncodeRange(key, {}, 0), deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<RangeResult>(*reply, kPath, json::DecodeRange);
}

EtcdResult<RangeResult> EtcdClient::GetPrefix(std::string_view prefix, int64_t limit,
                                              Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/range";
  auto reply =
      impl_->Call(kPath, json::EncodeRange(prefix, PrefixRangeEnd(prefix), limit), deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<RangeResult>(*reply, kPath, json::DecodeRange);
}

namespace {
json::Decoded<DeleteResult> DecodeDelete(const bj::object& o) {
  auto header = json::DecodeHeader(o);
  if (Failed(header)) return std::get<json::DecodeError>(header);
  auto deleted = json::Int64Field(o, "deleted");
  if (Failed(deleted)) return std::get<json::DecodeError>(deleted);
  return DeleteResult{std::get<ResponseHeader>(header), std::get<int64_t>(deleted)};
}
}  // namespace

EtcdResult<DeleteResult> EtcdClient::Delete(std::string_view key, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/deleterange";
  auto reply = impl_->Call(kPath, json::EncodeDelete(key, {}), deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<DeleteResult>(*reply, kPath, DecodeDelete);
}

EtcdResult<DeleteResult> EtcdClient::DeletePrefix(std::string_view prefix, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/deleterange";
  auto reply = impl_->Call(kPath, json::EncodeDelete(prefix, PrefixRangeEnd(prefix)), deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<DeleteResult>(*reply, kPath, DecodeDelete);
}

EtcdResult<TxnResult> EtcdClient::Txn(const TxnRequest& request, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/txn";
  auto reply = impl_->Call(kPath, json::EncodeTxn(request), deadline);
  if (!reply.ok()) return reply.error();
  auto txn = impl_->DecodeWith<TxnResult>(*reply, kPath, json::DecodeTxn);
  if (!txn.ok()) return txn;
  const auto& branch = txn->succeeded ? request.success : request.failure;
  bool matches = branch.size() == txn->responses.size();
  for (size_t i = 0; matches && i < branch.size(); ++i) {
    matches = branch[i].kind == txn->responses[i].kind;
  }
  if (!matches) {
    return EtcdError{Code::kInternal,
                     reply->connection->Describe(kPath) +
                         ": malformed reply: the responses do not match the branch's ops",
                     true};
  }
  return txn;
}

EtcdResult<ResponseHeader> EtcdClient::Compact(int64_t revision, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/compaction";
  bj::object body;
  body["revision"] = std::to_string(revision);
  auto reply = impl_->Call(kPath, body, deadline);
  if (!reply.ok()) return reply.error();
  return impl_->DecodeWith<ResponseHeader>(*reply, kPath, json::DecodeHeader);
}

}  // namespace sundial::replication
