#include "client/client.h"

namespace sundial::client {

std::string Error::ToString() const { return std::string(CodeName(code)) + ": " + message; }

bool VerifyServerMessage(std::string_view bytes) {
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return verifier.VerifyBuffer<protocol::ServerMessage>(nullptr);
}

Result<Reply> Reply::FromServerMessage(std::string server_message) {
  if (!VerifyServerMessage(server_message)) {
    return Error::Connection(Code::kInternal,
                             "protocol: a frame from the server failed verification");
  }
  return FromVerified(std::move(server_message));
}

Result<Reply> Reply::FromVerified(std::string server_message) {
  const auto* message = flatbuffers::GetRoot<protocol::ServerMessage>(server_message.data());
  const protocol::Response* response = message->body_as_Response();
  if (response == nullptr) {
    return Error::Connection(Code::kInternal, "protocol: expected a Response from the server");
  }
  if (const protocol::Error* error = response->error()) {
    // Codes outside docs/protocol.md's list (and OK, which is no error) read as INTERNAL.
    const auto code = static_cast<uint8_t>(error->code());
    const bool known = code > 0 && code <= static_cast<uint8_t>(Code::kInternal);
    return Error::Server(known ? static_cast<Code>(code) : Code::kInternal,
                         error->message() ? error->message()->str() : std::string());
  }
  return Reply(std::move(server_message));
}

const protocol::Response& Reply::response() const {
  return *flatbuffers::GetRoot<protocol::ServerMessage>(bytes_.data())->body_as_Response();
}

}  // namespace sundial::client
