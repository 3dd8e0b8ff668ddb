// The HTTP JSON API (docs/http-api.md): routing of `/v1/...` requests and the mapping between
// HTTP bodies and the protocol's messages, with no I/O and no Asio or Beast, so that it builds
// fast, the unit tests call it directly and a libFuzzer target (tests/fuzz/http_api_fuzz.cc)
// feeds it untrusted bytes. server/http.cc reads the request, calls Route, submits the Request
// it returns through the operation table like any other door (same durability wait, same
// typed errors) and writes what MapReply makes of the reply.
//
// Routes:
//   POST /v1/<Operation>                    every operation of the operation table but the
//                                           WebSocket-only ones; the body is the JSON of a
//                                           WebSocket text frame, whole or just the op's table
//   POST /v1/queues/{q}/messages            enqueue one message (REST form)
//   POST /v1/queues/{q}/dequeue             dequeue -> {"messages": [...]}
//   POST /v1/queues/{q}/messages/{id}/complete | /fail | /extend
//   GET  /v1/queues/{q}/messages/{id}       one message
//   GET  /v1/queues/{q}                     one queue
//   GET  /v1/openapi.json                   the OpenAPI 3.1 document, generated from the schema
// Typed errors map to statuses by StatusOf; routing errors (404, 405, 401, 413) carry the same
// {"error": {"code", "message"}} body.
//
// Thread safety: an HttpApi is used by one thread at a time (it holds FlatBuffers parsers);
// make one per thread. Cost: parsing the schema once, at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/status.h"

namespace sundial::server {

struct HttpApiRequest {
  std::string_view method;         // "GET", "POST", ...
  std::string_view target;         // path and query, as on the request line
  std::string_view authorization;  // the Authorization header, or empty
  std::string_view body;
};

struct HttpApiResponse {
  int status = 200;
  std::string body;               // application/json
  std::string allow;              // 405: the methods the route takes (the Allow header)
  bool www_authenticate = false;  // 401: send WWW-Authenticate: Bearer
};

// How a reply to a routed request becomes an HTTP body.
enum class HttpReplyShape : uint8_t {
  kResponse,     // POST /v1/<Operation>: the Response's JSON
  kEnqueueOne,   // the one EnqueueResult
  kMessages,     // {"messages": [...]}
  kItemStatus,   // complete: the one item's status
  kResultTable,  // fail, extend, get queue: the result table's JSON
  kMessage,      // get: the message
};

struct HttpApiRoute {
  bool dispatch = false;  // true: submit `request`, then MapReply; false: send `response`
  std::string request;    // a verified Request FlatBuffer (dispatch)
  HttpReplyShape shape = HttpReplyShape::kResponse;
  // The request may be held (a Dequeue, Wait or Enqueue with wait_ms): the session watches for
  // the client hanging up meanwhile, so a gone client's long poll does not lease a message.
  bool may_wait = false;
  HttpApiResponse response;  // !dispatch
};

// The HTTP status of a typed error code (docs/http-api.md, "Statuses").
int StatusOf(Code code);

class HttpApi {
 public:
  HttpApi();
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Whether `target` belongs to the API (its path is /v1 or under /v1/).
  static bool Handles(std::string_view target);

  // `auth_token`: the server's token (--auth-token-file); empty: no authentication.
  HttpApiRoute Route(const HttpApiRequest& request, std::string_view auth_token);
  // `server_message`: the ServerMessage{Response} the operation table answered.
  HttpApiResponse MapReply(HttpReplyShape shape, std::string_view server_message);

  // A response for a request refused before routing (e.g. a body over the limit).
  static HttpApiResponse ErrorResponse(int status, Code code, std::string_view message);

  // The OpenAPI 3.1 document, derived from protocol/sundial.fbs.
  const std::string& OpenApi();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sundial::server
