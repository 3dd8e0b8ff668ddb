#include "engine/status.h"

#include <atomic>
#include <cstring>
#include <new>

namespace sundial {
namespace {

// The block behind an owned detail: the count of Statuses sharing it, then the text and a NUL.
struct TextHeader {
  std::atomic<uint32_t> refs;
};
constexpr size_t kTextOffset = sizeof(TextHeader);  // the block's start stays aligned

TextHeader* HeaderOf(const char* text) {
  return std::launder(reinterpret_cast<TextHeader*>(const_cast<char*>(text) - kTextOffset));
}

}  // namespace

const char* Status::NewText(std::string_view text) {
  char* block = static_cast<char*>(::operator new(kTextOffset + text.size() + 1));
  new (block) TextHeader{1};
  char* chars = block + kTextOffset;
  std::memcpy(chars, text.data(), text.size());
  chars[text.size()] = '\0';
  return chars;
}

void Status::Ref(const char* text) noexcept {
  HeaderOf(text)->refs.fetch_add(1, std::memory_order_relaxed);
}

void Status::Unref(const char* text) noexcept {
  TextHeader* header = HeaderOf(text);
  if (header->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    header->~TextHeader();
    ::operator delete(header);
  }
}

Status::Status(Code code, std::string_view detail, int sys_errno)
    : code_(code), owned_(true), sys_errno_(sys_errno), text_(NewText(detail)) {}

Status Status::WithContext(std::string_view context) const {
  std::string text(detail());
  text += ": ";
  text += context;
  return Status(code_, text, sys_errno_);
}

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kNotPrimary:
      return "NOT_PRIMARY";
  }
  return "UNKNOWN";
}

std::string Status::Message() const {
  if (ok()) return "OK";
  std::string m(detail());
  if (sys_errno_ != 0) {
    char buffer[128];
    // GNU strerror_r: thread-safe, returns the text (maybe not in buffer).
    const char* text = strerror_r(sys_errno_, buffer, sizeof buffer);
    if (!m.empty()) m += ": ";
    m += text;
    if (const char* name = strerrorname_np(sys_errno_)) {
      m += " (";
      m += name;
      m += ")";
    }
  }
  return m;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + Message();
}

}  // namespace sundial
