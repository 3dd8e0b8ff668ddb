// A WebSocket client for the end-to-end tests whose every operation has a deadline. Boost.Beast
// stays in ws_client.cc: the test files that include this header compile without it.
#pragma once

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sundial::e2e {

class WsClient {
 public:
  using error_code = boost::system::error_code;

  WsClient();
  ~WsClient();
  WsClient(const WsClient&) = delete;
  WsClient& operator=(const WsClient&) = delete;

  // Connects to 127.0.0.1:port and upgrades at /ws with the given extra headers (e.g.
  // {{"Origin", "http://x"}, {"Authorization", "Bearer T"}}). On a refused upgrade,
  // status() is the HTTP status of the refusal and UpgradeDeclined(ec) holds.
  error_code Connect(uint16_t port, std::vector<std::pair<std::string, std::string>> headers = {},
                     int timeout_ms = 5'000);
  int status() const;

  error_code SendBinary(std::string_view bytes, int timeout_ms = 5'000);
  error_code SendText(std::string_view text, int timeout_ms = 5'000);

  struct Message {
    bool text = false;
    std::string data;
  };
  // The next message, or nullopt (error in *error) when the connection ends or the deadline
  // passes (TimedOut(*error)).
  std::optional<Message> Read(int timeout_ms = 5'000, error_code* error = nullptr);

  void Close();

  static bool UpgradeDeclined(const error_code& ec);
  static bool TimedOut(const error_code& ec);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sundial::e2e
