// Status and Result: how every engine and WAL operation reports success or a typed error.
//
// Codes follow SPEC §3 and are chosen by what the client should do next (Abseil's status.h):
// UNAVAILABLE means retry the call, FAILED_PRECONDITION means fix state first.
// A Status carries a code, a static detail string (a literal naming the offending field or
// limit) and, for errors from the operating system, the errno (0 otherwise), so building an
// error never allocates on the hot path: the errno sits in what would be padding. The server
// turns code + detail (+ the errno's text, ToString) into the message text at the edge, so an
// EIO and an EROFS read differently ("Input/output error" vs "Read-only file system").
//
// Thread safety: value types, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sundial {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kFailedPrecondition = 4,
  kResourceExhausted = 5,
  kUnavailable = 6,
  kUnauthenticated = 7,
  kInternal = 8,
  // The server's, never the engine's: a mutation sent to a node that is not its cluster's primary.
  kNotPrimary = 9,
};

// "INVALID_ARGUMENT", "NOT_FOUND", ... as written in SPEC §3.
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  constexpr Status() = default;
  // `detail` must be a string with static storage duration (a literal).
  constexpr Status(Code code, const char* detail) : code_(code), detail_(detail) {}
  // An error from a system call: `sys_errno` is the errno it left (non-zero).
  constexpr Status(Code code, const char* detail, int sys_errno)
      : code_(code), sys_errno_(sys_errno), detail_(detail) {}

  static constexpr Status Ok() { return Status(); }

  constexpr bool ok() const { return code_ == Code::kOk; }
  constexpr Code code() const { return code_; }
  constexpr std::string_view detail() const { return detail_ ? detail_ : ""; }
  // The errno of a failed system call, or 0.
  constexpr int sys_errno() const { return sys_errno_; }
  // Built only when needed (on failure, at the edge): "detail", or with an errno
  // "detail: Input/output error (EIO)". "OK" for OK.
  std::string Message() const;
  // "CODE: " + Message().
  std::string ToString() const;

  friend constexpr bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_; }

 private:
  Code code_ = Code::kOk;
  int32_t sys_errno_ = 0;
  const char* detail_ = nullptr;
};

static_assert(sizeof(Status) == 16, "the errno fits the padding: a Status stays two words");

inline Status InvalidArgument(const char* detail) { return {Code::kInvalidArgument, detail}; }
inline Status NotFound(const char* detail) { return {Code::kNotFound, detail}; }
inline Status AlreadyExists(const char* detail) { return {Code::kAlreadyExists, detail}; }
inline Status FailedPrecondition(const char* detail) { return {Code::kFailedPrecondition, detail}; }
inline Status ResourceExhausted(const char* detail) { return {Code::kResourceExhausted, detail}; }
inline Status Unavailable(const char* detail) { return {Code::kUnavailable, detail}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : value_(status) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(value_); }
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace sundial
