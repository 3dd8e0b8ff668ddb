// The transports a client reaches the server by (metrics labels, operation table rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sundial::server {

enum class Transport : uint8_t { kTcp = 0, kWebSocket = 1, kHttp = 2 };
inline constexpr size_t kTransports = 3;
std::string_view TransportName(Transport t);

}  // namespace sundial::server
