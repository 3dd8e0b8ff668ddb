// The transports a client reaches the server by (metrics labels, operation table rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sundial::server {

// kReplication: a standby's connection to a primary's --replication-port (no requests).
enum class Transport : uint8_t { kTcp = 0, kWebSocket = 1, kHttp = 2, kReplication = 3 };
inline constexpr size_t kTransports = 4;
std::string_view TransportName(Transport t);

}  // namespace sundial::server
