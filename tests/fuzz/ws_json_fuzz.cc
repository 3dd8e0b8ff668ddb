// Fuzz target: WebSocket JSON text frames (server/http.cc): each is decoded by the JSON codec
// (protocol/json.h, the schema's own parser), verified as a Request and dispatched into an
// in-memory engine and log (dispatch_harness.h); the reply is printed back as JSON, as a JSON
// client receives it. An input holds several frames separated by the byte 0x1e (so one input
// can create a queue, enqueue and dequeue); a frame that does not decode gets an error and the
// connection goes on, as there. Seeds: tests/fuzz/ws_json/corpus (make_seeds.cc), dictionary
// tests/fuzz/ws_json.dict.
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/json.h"
#include "tests/fuzz/dispatch_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sundial;
  static protocol::JsonCodec* const requests = new protocol::JsonCodec("Request");
  static protocol::JsonCodec* const replies = new protocol::JsonCodec("ServerMessage");
  fuzz::DispatchHarness harness;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string bytes, error, json;
  while (!in.empty()) {
    const size_t end = in.find('\x1e');
    const std::string_view text = in.substr(0, end);
    in.remove_prefix(end == std::string_view::npos ? in.size() : end + 1);
    if (!requests->FromJson(text, &bytes, &error)) continue;
    // The parser stops at a NUL: a text with one that decodes was cut short, not parsed.
    if (text.find('\0') != std::string_view::npos) fuzz::Fail("a JSON text with a NUL decoded");
    if (!protocol::VerifyRequest(bytes)) continue;
    const std::string_view reply = harness.Handle(bytes, server::Transport::kWebSocket);
    // A reply echoes strings of the request; one that is not UTF-8 cannot be printed (the
    // session then sends {"error":"encoding"}), which is not a finding.
    (void)replies->ToJson(reply, &json, &error);
  }
  harness.CheckRecovery();
  return 0;
}
