#include <charconv>

#include "client/client.h"

namespace sundial::client {
namespace {

Result<Address> Invalid(std::string_view text, std::string_view why) {
  return Error::Local(Code::kInvalidArgument,
                      "address '" + std::string(text) + "': " + std::string(why));
}

}  // namespace

std::string Address::ToString() const {
  const std::string port_text = std::to_string(port);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}

Result<Address> ParseAddress(std::string_view text, uint16_t default_port) {
  Address out;
  out.port = default_port;
  std::string_view host = text;
  std::string_view port;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return Invalid(text, "'[' without ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Invalid(text, "expected ':' after ']'");
      port = rest.substr(1);
      has_port = true;
    }
    if (host.empty()) return Invalid(text, "empty host in brackets");
  } else {
    const size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      has_port = true;
      if (host.find(':') != std::string_view::npos) {
        return Invalid(text, "an IPv6 host needs brackets: [host]:port");
      }
    }
  }
  if (!host.empty()) out.host = std::string(host);
  if (has_port) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
        value > 65535) {
      return Invalid(text, "port must be a number in 1..65535");
    }
    out.port = static_cast<uint16_t>(value);
  }
  return out;
}

}  // namespace sundial::client
