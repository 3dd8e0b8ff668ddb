// Error and Result: how the client library reports a failed call.
//
// The engine's Status carries a static detail string; a client must also carry the server's
// message text (and messages it builds itself, naming a host or a timeout), so the client has
// its own Error: the same Code values (protocol Code == engine Code), an owned message, and
// where the error came from:
//   - Origin::kServer: the server answered with this error (Response.error, or a per-item
//     error the caller chose to surface);
//   - Origin::kConnection: the call got no answer. The server could not be reached, the
//     connection dropped or the call timed out (code UNAVAILABLE), or the server broke the
//     protocol: a frame that fails verification, an empty or oversized frame (code INTERNAL);
//   - Origin::kLocal: the call was refused before anything was sent: request bytes that are
//     not a Request, a request_id already in flight (INVALID_ARGUMENT), too many calls in
//     flight (RESOURCE_EXHAUSTED).
// The CLI maps kConnection + UNAVAILABLE to "the server cannot be reached" (exit 3).
//
// Result<T> holds a T or an Error; Result<void> holds nothing or an Error.
//
// Thread safety: value types, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "engine/status.h"

namespace sundial::client {

struct Error {
  enum class Origin : uint8_t { kServer, kConnection, kLocal };

  Code code = Code::kInternal;
  std::string message;
  Origin origin = Origin::kServer;
  std::string primary;  // NOT_PRIMARY: the primary's address, when the server named it

  static Error Server(Code code, std::string message) {
    return {code, std::move(message), Origin::kServer, {}};
  }
  static Error Connection(Code code, std::string message) {
    return {code, std::move(message), Origin::kConnection, {}};
  }
  static Error Local(Code code, std::string message) {
    return {code, std::move(message), Origin::kLocal, {}};
  }

  // The server was never reached, or stopped answering (not a protocol violation).
  bool unreachable() const { return origin == Origin::kConnection && code == Code::kUnavailable; }
  // "NOT_FOUND: queue: no such queue".
  std::string ToString() const;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : value_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(value_); }
  // REQUIRES: !ok().
  const Error& error() const { return std::get<Error>(value_); }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> value_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return !error_.has_value(); }
  // REQUIRES: !ok().
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

}  // namespace sundial::client
