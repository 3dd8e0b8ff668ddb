// Status and Result: how every engine and WAL operation reports success or a typed error.
//
// Codes are chosen by what the client should do next (Abseil's status.h; the table is in
// docs/protocol.md, "Errors"): UNAVAILABLE means retry the call, FAILED_PRECONDITION means fix
// state first.
//
// A Status is a code, a detail (the message text) and, for an error from the operating system,
// the errno (0 otherwise). The detail is either
// - a literal (static storage: "queue: no such queue"): the fast path. Nothing is allocated to
//   build, copy or destroy it, so success and the hot refusals cost no more than two words; or
// - owned text with context a literal cannot hold: the file that failed ("wal: fdatasync failed
//   on /data/wal-0000000000000004.log"), the damaged record, the budget in bytes. Building one
//   allocates once; copies share that text (an atomic reference count, never a copy of the
//   text), so a prebuilt error such as the memory-budget refusal is returned per request without
//   allocating.
// The errno is kept apart from the text (as LevelDB's PosixError keeps it in the message), so
// Message() says "Input/output error (EIO)" or "Read-only file system (EROFS)": they need
// different operator actions. The text of a whole message is built only where it is shown
// (Message, ToString), at the edge.
//
// Cost: sizeof(Status) is 16 (the errno and the owned flag sit in what would be padding). A
// Status is not trivially copyable: a copy or destruction tests one flag, and touches the
// shared count only when the detail is owned.
//
// Thread safety: value types. Copies of one Status may be used and destroyed on different
// threads (the count is atomic); one Status object is not written by two threads at once.
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

// "INVALID_ARGUMENT", "NOT_FOUND", ... as written on the wire (docs/protocol.md, "Errors").
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  constexpr Status() = default;
  // `detail` must be a string with static storage duration (a literal). `sys_errno`: for an
  // error from a system call, the errno it left (non-zero).
  constexpr Status(Code code, const char* detail, int sys_errno = 0) noexcept
      : code_(code), sys_errno_(sys_errno), text_(detail) {}
  // An owned detail (allocates once; copies share it).
  Status(Code code, std::string_view detail, int sys_errno = 0);

  constexpr Status(const Status& other) noexcept
      : code_(other.code_), owned_(other.owned_), sys_errno_(other.sys_errno_), text_(other.text_) {
    if (owned_) Ref(text_);
  }
  constexpr Status(Status&& other) noexcept
      : code_(other.code_), owned_(other.owned_), sys_errno_(other.sys_errno_), text_(other.text_) {
    other.owned_ = false;
  }
  Status& operator=(const Status& other) noexcept {
    if (other.owned_) Ref(other.text_);
    Release();
    Assign(other);
    return *this;
  }
  Status& operator=(Status&& other) noexcept {
    if (this != &other) {
      Release();
      Assign(other);
      other.owned_ = false;
    }
    return *this;
  }
  constexpr ~Status() {
    if (owned_) Unref(text_);
  }

  static constexpr Status Ok() { return Status(); }

  constexpr bool ok() const { return code_ == Code::kOk; }
  constexpr Code code() const { return code_; }
  // The message text without the errno: what the wire's error message carries.
  constexpr std::string_view detail() const { return text_ ? text_ : ""; }
  // The errno of a failed system call, or 0.
  constexpr int sys_errno() const { return sys_errno_; }

  // This error with context after its detail ("DETAIL: CONTEXT", as LevelDB's
  // Status(code, msg, msg2)): the same code and errno. Allocates.
  Status WithContext(std::string_view context) const;
  // The same detail and errno under another code (the text is shared: no allocation).
  Status WithCode(Code code) const {
    Status s = *this;
    s.code_ = code;
    return s;
  }

  // Built only when needed (on failure, at the edge): "detail", or with an errno
  // "detail: Input/output error (EIO)". "OK" for OK.
  std::string Message() const;
  // "CODE: " + Message().
  std::string ToString() const;

  // Equal when the codes are: what a caller (and a test) decides on is what to do next, which
  // the code says. Details now carry file names and numbers; a test that pins the text compares
  // detail() or Message().
  friend constexpr bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_; }

 private:
  // An owned detail is the text of a block made by NewText, behind its reference count
  // (status.cc).
  static const char* NewText(std::string_view text);
  static void Ref(const char* text) noexcept;
  static void Unref(const char* text) noexcept;
  void Release() noexcept {
    if (owned_) Unref(text_);
  }
  void Assign(const Status& other) noexcept {
    code_ = other.code_;
    owned_ = other.owned_;
    sys_errno_ = other.sys_errno_;
    text_ = other.text_;
  }

  Code code_ = Code::kOk;
  bool owned_ = false;  // text_ is a NewText block, not a literal
  int32_t sys_errno_ = 0;
  const char* text_ = nullptr;
};

static_assert(sizeof(Status) == 16, "the errno and the flag fit the padding: two words");

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
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : value_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

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
