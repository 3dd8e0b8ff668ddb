#include <algorithm>
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

Result<std::vector<Address>> ParseAddressList(std::string_view text, uint16_t default_port) {
  std::vector<Address> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string_view element = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!element.empty() && (element.front() == ' ' || element.front() == '\t')) {
      element.remove_prefix(1);
    }
    while (!element.empty() && (element.back() == ' ' || element.back() == '\t')) {
      element.remove_suffix(1);
    }
    if (element.empty()) {
      return Invalid(text, "an empty element in the list (addresses are separated by commas)")
          .error();
    }
    Result<Address> address = ParseAddress(element, default_port);
    if (!address.ok()) return address.error();
    if (std::find(out.begin(), out.end(), *address) == out.end()) out.push_back(*address);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace sundial::client
