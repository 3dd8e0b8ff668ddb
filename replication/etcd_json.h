// The JSON forms of etcd 3.4's gateway (internal to replication/): base64 for bytes, int64s
// as decimal strings (how the gateway writes them; it reads strings or numbers), absent fields
// meaning zero/false/empty (proto3's JSON mapping), and the two error shapes:
//   unary replies (any HTTP status):  {"error": "...", "message": "...", "code": <gRPC code>}
//   streamed replies (watch, keepalive): {"error": {"grpc_code": N, "http_code": N,
//                                                   "message": "...", "http_status": "..."}}
// Decoders never trust the reply: every field is type-checked and a mismatch is an error
// naming the field, which the caller turns into INTERNAL ("malformed reply").
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "replication/etcd_client.h"

namespace sundial::replication::json {

std::string Base64Encode(std::string_view bytes);
// nullopt for characters outside the standard alphabet, bad padding or a bad length.
std::optional<std::string> Base64Decode(std::string_view text);

// A decode failure: what was wrong, e.g. "header.revision: not an integer".
struct DecodeError {
  std::string what;
};

template <typename T>
using Decoded = std::variant<T, DecodeError>;

// Parses a whole body as one JSON object.
Decoded<boost::json::object> ParseObject(std::string_view body);

Decoded<int64_t> Int64Field(const boost::json::object& o, std::string_view name);
// etcd's uint64s (cluster and member ids): above INT64_MAX as often as not.
Decoded<uint64_t> Uint64Field(const boost::json::object& o, std::string_view name);
Decoded<bool> BoolField(const boost::json::object& o, std::string_view name);
// A base64 field, decoded.
Decoded<std::string> BytesField(const boost::json::object& o, std::string_view name);

Decoded<ResponseHeader> DecodeHeader(const boost::json::object& reply);
Decoded<KeyValue> DecodeKeyValue(const boost::json::value& kv);
Decoded<RangeResult> DecodeRange(const boost::json::object& reply);
Decoded<TxnResult> DecodeTxn(const boost::json::object& reply);

// An error carried by a reply, in either shape. nullopt when the reply has no "error".
struct GatewayError {
  int grpc_code = 0;
  std::string message;
};
std::optional<GatewayError> FindError(const boost::json::object& reply);

// gRPC status code → our Code (docs/replication.md, "Errors").
Code CodeOfGrpc(int grpc_code);
// Whether another endpoint might serve the request (UNAVAILABLE, DEADLINE_EXCEEDED).
bool GrpcCodeTriesNextEndpoint(int grpc_code);

// Request bodies.
boost::json::object EncodeRange(std::string_view key, std::string_view range_end, int64_t limit);
boost::json::object EncodePut(std::string_view key, std::string_view value, int64_t lease);
boost::json::object EncodeDelete(std::string_view key, std::string_view range_end);
boost::json::object EncodeTxn(const TxnRequest& request);

}  // namespace sundial::replication::json
