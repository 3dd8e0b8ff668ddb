#include "protocol/json.h"

#include <flatbuffers/idl.h>

#include <cstdlib>
#include <string>

#include "protocol/schema_text.h"

namespace sundial::protocol {

struct JsonCodec::Impl {
  flatbuffers::Parser parser;

  explicit Impl(const flatbuffers::IDLOptions& options) : parser(options) {}
};

JsonCodec::JsonCodec(std::string_view root_type) {
  flatbuffers::IDLOptions options;
  options.strict_json = true;
  options.indent_step = -1;  // one line
  options.skip_unexpected_fields_in_json = false;
  impl_ = std::make_unique<Impl>(options);
  // The schema is compiled into the binary and checked by the tests: failing here is a build
  // defect, not an input error.
  if (!impl_->parser.Parse(kSchemaText) ||
      !impl_->parser.SetRootType(std::string(root_type).c_str())) {
    std::abort();
  }
}

JsonCodec::~JsonCodec() = default;

bool JsonCodec::FromJson(std::string_view json, std::string* flatbuffer, std::string* error) {
  // The parser reads up to a terminating NUL: one inside would cut the text short there.
  if (const size_t nul = json.find('\0'); nul != std::string_view::npos) {
    *error = "a NUL byte at offset " + std::to_string(nul) + " (never valid in JSON text)";
    return false;
  }
  const std::string text(json);
  if (!impl_->parser.ParseJson(text.c_str())) {
    *error = impl_->parser.error_;
    return false;
  }
  const auto& builder = impl_->parser.builder_;
  flatbuffer->assign(reinterpret_cast<const char*>(builder.GetBufferPointer()), builder.GetSize());
  return true;
}

bool JsonCodec::ToJson(std::string_view flatbuffer, std::string* json, std::string* error) {
  json->clear();
  if (!flatbuffers::GenerateText(impl_->parser, flatbuffer.data(), json)) {
    *error = "message cannot be printed as JSON (a string that is not UTF-8)";
    return false;
  }
  return true;
}

}  // namespace sundial::protocol
