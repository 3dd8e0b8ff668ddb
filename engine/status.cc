#include "engine/status.h"

#include <cstring>

namespace sundial {

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
