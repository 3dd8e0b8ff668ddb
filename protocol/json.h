// The JSON form of the protocol's messages (WebSocket text frames, the CLI's debugging output),
// derived from sundial.fbs by FlatBuffers' own parser and printer — no second, hand-kept mapping.
// Field names are the schema's (snake_case); a union is two fields, `<name>_type` (the member's
// name) and `<name>` (its table), e.g.
//   {"request_id": 7, "op_type": "Enqueue", "op": {"queue": "emails", "items": [{"id": "m1"}]}}
//
// Thread safety: a JsonCodec is used by one thread at a time (the FlatBuffers parser keeps
// state); make one per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace sundial::protocol {

class JsonCodec {
 public:
  // `root_type`: "Request" or "ServerMessage".
  explicit JsonCodec(std::string_view root_type);
  ~JsonCodec();
  JsonCodec(const JsonCodec&) = delete;
  JsonCodec& operator=(const JsonCodec&) = delete;

  // JSON text -> FlatBuffer bytes. False, with a message naming the problem in *error, on
  // malformed JSON, an unknown field or union member, or a value of the wrong type.
  bool FromJson(std::string_view json, std::string* flatbuffer, std::string* error);
  // FlatBuffer bytes of the root type (verified by the caller) -> one line of strict JSON.
  bool ToJson(std::string_view flatbuffer, std::string* json, std::string* error);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sundial::protocol
