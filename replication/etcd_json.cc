#include "replication/etcd_json.h"

#include <array>
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <charconv>
#include <utility>

namespace sundial::replication::json {
namespace {

namespace bj = boost::json;

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> table{};
  for (auto& t : table) t = -1;
  for (size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  }
  return table;
}
constexpr std::array<int8_t, 256> kDecodeTable = MakeDecodeTable();

DecodeError Bad(std::string_view field, std::string_view what) {
  std::string s(field);
  s += ": ";
  s += what;
  return {std::move(s)};
}

template <typename T>
bool Failed(const Decoded<T>& d) {
  return std::holds_alternative<DecodeError>(d);
}
template <typename T>
DecodeError ErrorOf(Decoded<T>& d, std::string_view prefix = {}) {
  DecodeError e = std::get<DecodeError>(std::move(d));
  if (!prefix.empty()) e.what = std::string(prefix) + "." + e.what;
  return e;
}

std::string Int(int64_t v) { return std::to_string(v); }

std::string_view CompareTarget(Compare::Target t) {
  switch (t) {
    case Compare::Target::kCreateRevision:
      return "CREATE";
    case Compare::Target::kModRevision:
      return "MOD";
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kValue:
      return "VALUE";
  }
  return "CREATE";
}

std::string_view CompareResult(Compare::Relation r) {
  switch (r) {
    case Compare::Relation::kEqual:
      return "EQUAL";
    case Compare::Relation::kNotEqual:
      return "NOT_EQUAL";
    case Compare::Relation::kGreater:
      return "GREATER";
    case Compare::Relation::kLess:
      return "LESS";
  }
  return "EQUAL";
}

// A key of a request: etcd refuses an empty key, so the empty prefix ("every key") is "\0".
std::string_view RequestKey(std::string_view key, std::string_view range_end) {
  using namespace std::string_view_literals;
  if (key.empty() && !range_end.empty()) return "\0"sv;
  return key;
}

bj::object EncodeOp(const TxnOp& op) {
  bj::object wrapper;
  switch (op.kind) {
    case TxnOp::Kind::kPut:
      wrapper["request_put"] = EncodePut(op.key, op.value, op.lease);
      break;
    case TxnOp::Kind::kDelete:
      wrapper["request_delete_range"] = EncodeDelete(op.key, op.range_end);
      break;
    case TxnOp::Kind::kRange:
      wrapper["request_range"] = EncodeRange(op.key, op.range_end, 0);
      break;
  }
  return wrapper;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       uint32_t{static_cast<unsigned char>(bytes[i + 2])};
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t n = uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    if (rest == 2) n |= uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    if (last && text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    uint32_t n = 0;
    for (int j = 0; j < 4 - pad; ++j) {
      const int8_t v = kDecodeTable[static_cast<unsigned char>(text[i + j])];
      if (v < 0) return std::nullopt;
      n |= static_cast<uint32_t>(v) << (18 - 6 * j);
    }
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

Decoded<bj::object> ParseObject(std::string_view body) {
  boost::system::error_code ec;
  bj::value v = bj::parse(body, ec);
  if (ec) return DecodeError{"not JSON: " + ec.message()};
  if (!v.is_object()) return DecodeError{"not a JSON object"};
  return std::move(v.as_object());
}

Decoded<int64_t> Int64Field(const bj::object& o, std::string_view name) {
  const bj::value* v = o.if_contains(name);
  if (v == nullptr || v->is_null()) return int64_t{0};
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v->as_uint64());
  }
  if (v->is_string()) {
    const bj::string& s = v->as_string();
    int64_t out = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return out;
  }
  return Bad(name, "not an int64");
}

Decoded<uint64_t> Uint64Field(const bj::object& o, std::string_view name) {
  const bj::value* v = o.if_contains(name);
  if (v == nullptr || v->is_null()) return uint64_t{0};
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  if (v->is_string()) {
    const bj::string& s = v->as_string();
    uint64_t out = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return out;
  }
  return Bad(name, "not a uint64");
}

Decoded<bool> BoolField(const bj::object& o, std::string_view name) {
  const bj::value* v = o.if_contains(name);
  if (v == nullptr || v->is_null()) return false;
  if (v->is_bool()) return v->as_bool();
  return Bad(name, "not a boolean");
}

Decoded<std::string> BytesField(const bj::object& o, std::string_view name) {
  const bj::value* v = o.if_contains(name);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) return Bad(name, "not a string");
  auto bytes = Base64Decode(v->as_string());
  if (!bytes) return Bad(name, "not base64");
  return std::move(*bytes);
}

Decoded<ResponseHeader> DecodeHeader(const bj::object& reply) {
  ResponseHeader header;
  const bj::value* v = reply.if_contains("header");
  if (v == nullptr || v->is_null()) return header;
  if (!v->is_object()) return Bad("header", "not an object");
  const bj::object& h = v->as_object();
  auto cluster = Uint64Field(h, "cluster_id");
  auto member = Uint64Field(h, "member_id");
  auto revision = Int64Field(h, "revision");
  auto term = Uint64Field(h, "raft_term");
  if (Failed(cluster)) return ErrorOf(cluster, "header");
  if (Failed(member)) return ErrorOf(member, "header");
  if (Failed(revision)) return ErrorOf(revision, "header");
  if (Failed(term)) return ErrorOf(term, "header");
  header.cluster_id = std::get<uint64_t>(cluster);
  header.member_id = std::get<uint64_t>(member);
  header.revision = std::get<int64_t>(revision);
  header.raft_term = std::get<uint64_t>(term);
  return header;
}

Decoded<KeyValue> DecodeKeyValue(const bj::value& v) {
  if (!v.is_object()) return Bad("kv", "not an object");
  const bj::object& o = v.as_object();
  KeyValue kv;
  auto key = BytesField(o, "key");
  if (Failed(key)) return ErrorOf(key, "kv");
  auto value = BytesField(o, "value");
  if (Failed(value)) return ErrorOf(value, "kv");
  kv.key = std::get<std::string>(std::move(key));
  kv.value = std::get<std::string>(std::move(value));
  for (auto [name, field] : {std::pair{"create_revision", &kv.create_revision},
                             std::pair{"mod_revision", &kv.mod_revision},
                             std::pair{"version", &kv.version}, std::pair{"lease", &kv.lease}}) {
    auto n = Int64Field(o, name);
    if (Failed(n)) return ErrorOf(n, "kv");
    *field = std::get<int64_t>(n);
  }
  return kv;
}

Decoded<RangeResult> DecodeRange(const bj::object& reply) {
  RangeResult range;
  auto header = DecodeHeader(reply);
  if (Failed(header)) return ErrorOf(header);
  range.header = std::get<ResponseHeader>(header);
  if (const bj::value* kvs = reply.if_contains("kvs"); kvs != nullptr && !kvs->is_null()) {
    if (!kvs->is_array()) return Bad("kvs", "not an array");
    for (const bj::value& v : kvs->as_array()) {
      auto kv = DecodeKeyValue(v);
      if (Failed(kv)) return ErrorOf(kv);
      range.kvs.push_back(std::get<KeyValue>(std::move(kv)));
    }
  }
  auto count = Int64Field(reply, "count");
  if (Failed(count)) return ErrorOf(count);
  range.count = std::get<int64_t>(count);
  auto more = BoolField(reply, "more");
  if (Failed(more)) return ErrorOf(more);
  range.more = std::get<bool>(more);
  return range;
}

Decoded<TxnResult> DecodeTxn(const bj::object& reply) {
  TxnResult txn;
  auto header = DecodeHeader(reply);
  if (Failed(header)) return ErrorOf(header);
  txn.header = std::get<ResponseHeader>(header);
  auto succeeded = BoolField(reply, "succeeded");
  if (Failed(succeeded)) return ErrorOf(succeeded);
  txn.succeeded = std::get<bool>(succeeded);
  const bj::value* responses = reply.if_contains("responses");
  if (responses == nullptr || responses->is_null()) return txn;
  if (!responses->is_array()) return Bad("responses", "not an array");
  for (const bj::value& r : responses->as_array()) {
    if (!r.is_object()) return Bad("responses", "not an object");
    const bj::object& o = r.as_object();
    TxnOpResponse op;
    if (const bj::value* range = o.if_contains("response_range")) {
      if (!range->is_object()) return Bad("response_range", "not an object");
      auto decoded = DecodeRange(range->as_object());
      if (Failed(decoded)) return ErrorOf(decoded, "response_range");
      op.kind = TxnOp::Kind::kRange;
      op.range = std::get<RangeResult>(std::move(decoded));
    } else if (const bj::value* del = o.if_contains("response_delete_range")) {
      if (!del->is_object()) return Bad("response_delete_range", "not an object");
      auto deleted = Int64Field(del->as_object(), "deleted");
      if (Failed(deleted)) return ErrorOf(deleted, "response_delete_range");
      op.kind = TxnOp::Kind::kDelete;
      op.deleted = std::get<int64_t>(deleted);
    } else if (const bj::value* put = o.if_contains("response_put")) {
      if (!put->is_object()) return Bad("response_put", "not an object");
      op.kind = TxnOp::Kind::kPut;
    } else {
      return Bad("responses", "an op response of an unknown kind");
    }
    txn.responses.push_back(std::move(op));
  }
  return txn;
}

std::optional<GatewayError> FindError(const bj::object& reply) {
  const bj::value* e = reply.if_contains("error");
  if (e == nullptr || e->is_null()) return std::nullopt;
  GatewayError error;
  error.grpc_code = 2;   // UNKNOWN unless the reply says
  if (e->is_object()) {  // a streamed reply's error
    const bj::object& o = e->as_object();
    if (auto code = Int64Field(o, "grpc_code"); !Failed(code)) {
      error.grpc_code = static_cast<int>(std::get<int64_t>(code));
    }
    if (const bj::value* m = o.if_contains("message"); m != nullptr && m->is_string()) {
      error.message = std::string(m->as_string());
    }
  } else {
    if (auto code = Int64Field(reply, "code"); !Failed(code)) {
      error.grpc_code = static_cast<int>(std::get<int64_t>(code));
    }
    if (const bj::value* m = reply.if_contains("message"); m != nullptr && m->is_string()) {
      error.message = std::string(m->as_string());
    } else if (e->is_string()) {
      error.message = std::string(e->as_string());
    }
  }
  if (error.message.empty()) error.message = "(no message)";
  return error;
}

Code CodeOfGrpc(int grpc_code) {
  switch (grpc_code) {
    case 0:
      return Code::kOk;
    case 1:   // CANCELLED
    case 4:   // DEADLINE_EXCEEDED
    case 14:  // UNAVAILABLE: no leader, request timed out, leader changed, stopped
      return Code::kUnavailable;
    case 3:  // INVALID_ARGUMENT: empty key, bad range, too large a request
      return Code::kInvalidArgument;
    case 5:  // NOT_FOUND: the lease
      return Code::kNotFound;
    case 6:  // ALREADY_EXISTS
      return Code::kAlreadyExists;
    case 8:  // RESOURCE_EXHAUSTED: quota, too many requests
      return Code::kResourceExhausted;
    case 9:   // FAILED_PRECONDITION
    case 11:  // OUT_OF_RANGE: revision compacted or in the future
      return Code::kFailedPrecondition;
    case 7:   // PERMISSION_DENIED
    case 16:  // UNAUTHENTICATED
      return Code::kUnauthenticated;
    default:
      return Code::kInternal;
  }
}

bool GrpcCodeTriesNextEndpoint(int grpc_code) { return grpc_code == 4 || grpc_code == 14; }

bj::object EncodeRange(std::string_view key, std::string_view range_end, int64_t limit) {
  bj::object o;
  o["key"] = Base64Encode(RequestKey(key, range_end));
  if (!range_end.empty()) o["range_end"] = Base64Encode(range_end);
  if (limit > 0) o["limit"] = Int(limit);
  return o;
}

bj::object EncodePut(std::string_view key, std::string_view value, int64_t lease) {
  bj::object o;
  o["key"] = Base64Encode(key);
  o["value"] = Base64Encode(value);
  if (lease != 0) o["lease"] = Int(lease);
  return o;
}

bj::object EncodeDelete(std::string_view key, std::string_view range_end) {
  bj::object o;
  o["key"] = Base64Encode(RequestKey(key, range_end));
  if (!range_end.empty()) o["range_end"] = Base64Encode(range_end);
  return o;
}

bj::object EncodeTxn(const TxnRequest& request) {
  bj::object o;
  bj::array compare;
  for (const Compare& c : request.compare) {
    bj::object x;
    x["key"] = Base64Encode(c.key);
    x["target"] = CompareTarget(c.target);
    x["result"] = CompareResult(c.relation);
    switch (c.target) {
      case Compare::Target::kCreateRevision:
        x["create_revision"] = Int(c.number);
        break;
      case Compare::Target::kModRevision:
        x["mod_revision"] = Int(c.number);
        break;
      case Compare::Target::kVersion:
        x["version"] = Int(c.number);
        break;
      case Compare::Target::kValue:
        x["value"] = Base64Encode(c.value);
        break;
    }
    compare.push_back(std::move(x));
  }
  bj::array success;
  for (const TxnOp& op : request.success) success.push_back(EncodeOp(op));
  bj::array failure;
  for (const TxnOp& op : request.failure) failure.push_back(EncodeOp(op));
  o["compare"] = std::move(compare);
  o["success"] = std::move(success);
  o["failure"] = std::move(failure);
  return o;
}

}  // namespace sundial::replication::json
