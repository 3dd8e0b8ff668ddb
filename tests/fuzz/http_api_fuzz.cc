// Fuzz target: the HTTP JSON API's routing and bodies (server/http_api.h), the part of the HTTP
// port that reads untrusted bytes after Beast's parser. An input holds several requests
// separated by the byte 0x1e; each is "METHOD TARGET\nAUTHORIZATION\nBODY". Each is routed with
// the token "t0k" (so both sides of auth are reached); a request the router makes is dispatched
// into an in-memory engine and log (dispatch_harness.h) and its reply mapped back to HTTP.
// Seeds: tests/fuzz/http_api/corpus, dictionary tests/fuzz/http_api.dict.
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/verify.h"
#include "server/http_api.h"
#include "tests/fuzz/dispatch_harness.h"

namespace {

std::string_view NextLine(std::string_view* in) {
  const size_t end = in->find('\n');
  const std::string_view line = in->substr(0, end);
  in->remove_prefix(end == std::string_view::npos ? in->size() : end + 1);
  return line;
}

void CheckResponse(const sundial::server::HttpApiResponse& r) {
  using sundial::fuzz::Fail;
  if (r.status < 200 || r.status > 599) Fail("a status out of range");
  if (r.body.empty() || r.body.front() != '{' || r.body.back() != '}') {
    Fail("a body that is not a JSON object:", r.body);
  }
  if (r.status == 405 && r.allow.empty()) Fail("405 without Allow");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sundial;
  static server::HttpApi* const api = new server::HttpApi();
  fuzz::DispatchHarness harness;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (!in.empty()) {
    const size_t end = in.find('\x1e');
    std::string_view text = in.substr(0, end);
    in.remove_prefix(end == std::string_view::npos ? in.size() : end + 1);
    std::string_view line = NextLine(&text);
    const std::string_view method = line.substr(0, line.find(' '));
    const std::string_view target =
        line.find(' ') == std::string_view::npos ? "" : line.substr(line.find(' ') + 1);
    const std::string_view authorization = NextLine(&text);
    const server::HttpApiRoute route = api->Route(
        {.method = method, .target = target, .authorization = authorization, .body = text}, "t0k");
    if (!route.dispatch) {
      CheckResponse(route.response);
      continue;
    }
    if (!protocol::VerifyRequest(route.request))
      fuzz::Fail("the router made an unverified request");
    const std::string_view reply = harness.Handle(route.request, server::Transport::kHttp);
    CheckResponse(api->MapReply(route.shape, reply));
  }
  harness.CheckRecovery();
  return 0;
}
