#include "server/http_api.h"

#include <flatbuffers/flexbuffers.h>
#include <flatbuffers/idl.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/validation.h"
#include "protocol/schema_text.h"
#include "protocol/sundial_generated.h"
#include "protocol/verify.h"
#include "server/dispatch.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

constexpr std::string_view kPrefix = "/v1";

// ---- JSON text --------------------------------------------------------------------------------

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (u < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out->append("\\u00");
          out->push_back(kHex[u >> 4]);
          out->push_back(kHex[u & 15]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Standard alphabet, padding optional. False on any other character.
bool FromBase64(std::string_view in, std::string* out) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  out->clear();
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : in) {
    const size_t v = kBase64.find(c);
    if (v == std::string_view::npos) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return bits < 6;  // a lone trailing character carries no whole byte
}

// `{"code": "...", "message": "...", "primary"?}`: the JSON of the schema's Error table.
std::string ErrorJson(Code code, std::string_view message, std::string_view primary = {}) {
  std::string out = R"({"code":")";
  out += CodeName(code);
  out += R"(","message":)";
  AppendJsonString(message, &out);
  if (!primary.empty()) {
    out += R"(,"primary":)";
    AppendJsonString(primary, &out);
  }
  out += '}';
  return out;
}

std::string_view Str(const fb::String* s) { return s ? s->string_view() : std::string_view(); }
std::string_view Bytes(const fb::Vector<uint8_t>* v) {
  return v ? std::string_view(reinterpret_cast<const char*>(v->data()), v->size())
           : std::string_view();
}

// Bytes as the REST forms show them: a UTF-8 string as is, anything else as {"base64": ...}.
void AppendPayload(std::string_view bytes, std::string* out) {
  if (IsValidUtf8(bytes)) return AppendJsonString(bytes, out);
  *out += R"({"base64":")";
  *out += Base64(bytes);
  *out += "\"}";
}

void AppendMessage(const p::Message& m, std::string* out) {
  auto field = [&](std::string_view name, bool first = false) {
    if (!first) *out += ',';
    AppendJsonString(name, out);
    *out += ':';
  };
  *out += '{';
  field("queue", true);
  AppendJsonString(Str(m.queue()), out);
  field("id");
  AppendJsonString(Str(m.id()), out);
  field("priority");
  *out += std::to_string(m.priority());
  field("payload");
  AppendPayload(Bytes(m.payload()), out);
  field("metadata");
  *out += '{';
  if (m.metadata() != nullptr) {
    bool first = true;
    for (const p::MetadataPair* pair : *m.metadata()) {
      if (!first) *out += ',';
      first = false;
      AppendJsonString(Str(pair->key()), out);
      *out += ':';
      AppendJsonString(Str(pair->value()), out);
    }
  }
  *out += '}';
  field("state");
  AppendJsonString(p::EnumNameMessageState(m.state()), out);
  field("attempts");
  *out += std::to_string(m.attempts());
  field("max_attempts");
  *out += std::to_string(m.max_attempts());
  field("visible_at");
  *out += std::to_string(m.visible_at());
  field("lease_token");
  *out += std::to_string(m.lease_token());
  field("lease_expires_at");
  *out += std::to_string(m.lease_expires_at());
  field("version");
  *out += std::to_string(m.version());
  field("enqueued_at");
  *out += std::to_string(m.enqueued_at());
  field("updated_at");
  *out += std::to_string(m.updated_at());
  field("last_error");
  AppendJsonString(Str(m.last_error()), out);
  if (m.expires_at() != 0) {  // a message with a ttl (docs/semantics.md, "Expiry")
    field("expires_at");
    *out += std::to_string(m.expires_at());
  }
  if (m.result() != nullptr) {
    field("result");
    AppendPayload(Bytes(m.result()), out);
  }
  if (m.dependency_results() != nullptr) {
    // include_dependency_results: per dependency, as `wait` reports an item.
    field("dependency_results");
    *out += '[';
    bool first = true;
    for (const p::WaitItem* d : *m.dependency_results()) {
      if (!first) *out += ',';
      first = false;
      *out += R"({"id":)";
      AppendJsonString(Str(d->id()), out);
      if (d->error() != nullptr) {
        *out += R"(,"error":)";
        *out += ErrorJson(static_cast<Code>(d->error()->code()), Str(d->error()->message()));
      } else {
        *out += R"(,"state":)";
        AppendJsonString(p::EnumNameMessageState(d->state()), out);
      }
      if (d->result() != nullptr) {
        *out += R"(,"result":)";
        AppendPayload(Bytes(d->result()), out);
      }
      if (d->last_error() != nullptr) {
        *out += R"(,"last_error":)";
        AppendJsonString(Str(d->last_error()), out);
      }
      *out += '}';
    }
    *out += ']';
  }
  *out += '}';
}

// ---- REST bodies (FlexBuffers parsed from JSON by FlatBuffers' own parser) -------------------

// One REST body's object: typed reads of its members, each naming the member it refuses.
class RestBody {
 public:
  // Refuses a member not in `allowed`.
  bool Only(std::initializer_list<std::string_view> allowed, std::string* error) const {
    const auto keys = map_.Keys();
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string_view key = keys[i].AsKey();
      bool known = false;
      for (const auto a : allowed) known = known || a == key;
      if (!known) {
        *error = "body: unknown member \"" + std::string(key) + "\"";
        return false;
      }
    }
    return true;
  }
  bool Has(const char* key) const { return !map_[key].IsNull(); }

  bool Int(const char* key, int64_t* out, std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsInt() || (v.IsUInt() && v.AsUInt64() <= INT64_MAX)) {
      *out = v.AsInt64();
      return true;
    }
    *error = std::string("body: \"") + key + "\" must be an integer";
    return false;
  }
  // A u64 as a JSON number or a decimal string (JavaScript's numbers stop at 2^53).
  bool UInt(const char* key, uint64_t* out, std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsUInt() || (v.IsInt() && v.AsInt64() >= 0)) {
      *out = v.AsUInt64();
      return true;
    }
    if (v.IsString()) {
      const std::string s = v.AsString().str();
      char* end = nullptr;
      if (!s.empty() && s[0] != '-' && s.size() <= 20) {
        errno = 0;
        *out = std::strtoull(s.c_str(), &end, 10);
        if (errno == 0 && end == s.c_str() + s.size()) return true;
      }
    }
    *error = std::string("body: \"") + key + "\" must be an unsigned integer";
    return false;
  }
  bool String(const char* key, std::string* out, std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsString()) {
      *out = v.AsString().str();
      return true;
    }
    *error = std::string("body: \"") + key + "\" must be a string";
    return false;
  }
  // A UTF-8 string or {"base64": "..."}.
  bool Payload(const char* key, std::string* out, std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsString()) {
      *out = v.AsString().str();
      return true;
    }
    if (v.IsMap()) {
      const auto m = v.AsMap();
      const auto b = m["base64"];
      if (m.size() == 1 && b.IsString() && FromBase64(b.AsString().str(), out)) return true;
    }
    *error = std::string("body: \"") + key +
             "\" must be a string or {\"base64\": \"...\"} (standard alphabet)";
    return false;
  }
  bool Bool(const char* key, bool* out, std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsBool()) {
      *out = v.AsBool();
      return true;
    }
    *error = std::string("body: \"") + key + "\" must be true or false";
    return false;
  }
  // ["a", "b", ...]
  bool Strings(const char* key, std::vector<std::string>* out, std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsVector() && !v.IsMap()) {
      const auto items = v.AsVector();
      bool ok = true;
      for (size_t i = 0; i < items.size() && ok; ++i) {
        ok = items[i].IsString();
        if (ok) out->push_back(items[i].AsString().str());
      }
      if (ok) return true;
    }
    *error = std::string("body: \"") + key + "\" must be an array of strings";
    return false;
  }
  // {"key": "value", ...}
  bool Pairs(const char* key, std::vector<std::pair<std::string, std::string>>* out,
             std::string* error) const {
    const auto v = map_[key];
    if (v.IsNull()) return true;
    if (v.IsMap()) {
      const auto m = v.AsMap();
      const auto keys = m.Keys();
      const auto values = m.Values();
      bool ok = true;
      for (size_t i = 0; i < keys.size() && ok; ++i) {
        ok = values[i].IsString();
        if (ok) out->emplace_back(keys[i].AsKey(), values[i].AsString().str());
      }
      if (ok) return true;
    }
    *error = std::string("body: \"") + key + "\" must be an object of strings";
    return false;
  }

  explicit RestBody(flexbuffers::Map map) : map_(map) {}

 private:
  flexbuffers::Map map_;
};

fb::Offset<fb::Vector<fb::Offset<p::MetadataPair>>> EncodePairs(
    fb::FlatBufferBuilder& b, const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<fb::Offset<p::MetadataPair>> out;
  for (const auto& [k, v] : pairs) {
    out.push_back(p::CreateMetadataPair(b, b.CreateString(k), b.CreateString(v)));
  }
  return b.CreateVector(out);
}

fb::Offset<fb::Vector<uint8_t>> EncodeBytes(fb::FlatBufferBuilder& b, std::string_view bytes) {
  return b.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// `%XX` decoded; false on a bad escape or an empty segment.
bool DecodeSegment(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = hex(in[i + 1]);
    const int lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return !out->empty();
}

std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

const OperationRow* RowNamed(std::string_view name) {
  for (const OperationRow& row : OperationTable()) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

const p::Request& RequestOf(const std::string& bytes) {
  return *fb::GetRoot<p::Request>(bytes.data());
}

bool MayWait(const p::Request& r) {
  if (const auto* d = r.op_as_Dequeue()) return d->wait_ms() > 0;
  if (const auto* w = r.op_as_Wait()) return w->wait_ms() > 0;
  if (const auto* e = r.op_as_Enqueue()) return e->wait_ms() > 0;
  return false;
}

// `name` in the target's query (`?a=1&name=true`): true or 1, false or 0; absent: *out unchanged.
bool QueryFlag(std::string_view target, std::string_view name, bool* out, std::string* error) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return true;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view value = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    if (value == "true" || value == "1") {
      *out = true;
    } else if (value == "false" || value == "0") {
      *out = false;
    } else {
      *error = "query: " + std::string(name) + " must be true or false";
      return false;
    }
  }
  return true;
}

bool OverHttp(const OperationRow& row) {
  return (row.transports & (1u << static_cast<uint8_t>(Transport::kHttp))) != 0;
}

}  // namespace

int StatusOf(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
      return 409;
    case Code::kFailedPrecondition:
      return 412;
    case Code::kResourceExhausted:
      return 429;
    case Code::kUnavailable:
      return 503;
    case Code::kNotPrimary:
      return 503;
    case Code::kInternal:
      return 500;
  }
  return 500;
}

HttpApiResponse HttpApi::ErrorResponse(int status, Code code, std::string_view message) {
  HttpApiResponse r;
  r.status = status;
  r.body = R"({"error":)" + ErrorJson(code, message) + "}";
  r.www_authenticate = status == 401;
  return r;
}

// ---- Impl -------------------------------------------------------------------------------------

struct HttpApi::Impl {
  fb::Parser schema;  // the protocol's schema: requests from JSON, tables to JSON
  fb::Parser flex;    // REST bodies: any JSON, into FlexBuffers
  flexbuffers::Builder flex_builder;
  std::string openapi;

  Impl() : schema(Options()), flex(Options()) {
    // The schema is compiled in and tested: failing here is a build defect, not an input error.
    if (!schema.Parse(p::kSchemaText) || !schema.SetRootType("Request")) std::abort();
  }

  static fb::IDLOptions Options() {
    fb::IDLOptions o;
    o.strict_json = true;
    o.indent_step = -1;
    o.skip_unexpected_fields_in_json = false;
    return o;
  }

  // A table of the schema as one line of JSON.
  std::string TableJson(const void* table, std::string_view name) {
    std::string out;
    if (!fb::GenerateTextFromTable(schema, table, "sundial.protocol." + std::string(name), &out)) {
      return R"js({"error":{"code":"INTERNAL","message":"reply: not printable as JSON (a string that is not UTF-8)"}})js";
    }
    return out;
  }

  // The JSON of a request: a whole Request, or (wrapped) just the table of `op`.
  bool ParseRequest(std::string_view op, std::string_view body, std::string* out,
                    std::string* error) {
    if (body.find('\0') != std::string_view::npos) {
      *error = "body: a NUL byte (never valid in JSON text)";
      return false;
    }
    std::string text(body.empty() ? std::string_view("{}") : body);
    if (schema.ParseJson(text.c_str())) {
      const auto& b = schema.builder_;
      out->assign(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
      const auto* request = fb::GetRoot<p::Request>(out->data());
      if (p::VerifyRequest(*out) && request->op_type() != p::Operation::NONE) return true;
    }
    const std::string whole_error = schema.error_;
    // A body that names op_type meant to be a whole Request: its own error; else the op table's
    // (as a Request, a bare table fails on its first field whatever is wrong with it).
    const bool whole = text.find("\"op_type\"") != std::string::npos;
    text = R"({"op_type":")" + std::string(op) + R"(","op":)" + text + "}";
    if (!schema.ParseJson(text.c_str())) {
      *error = "json: " + (whole ? whole_error : schema.error_);
      return false;
    }
    const auto& b = schema.builder_;
    out->assign(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
    return true;
  }

  // A REST body: an object (an empty body is {}).
  bool ParseObject(std::string_view body, flexbuffers::Map* out, std::string* error) {
    if (body.find('\0') != std::string_view::npos) {
      *error = "body: a NUL byte (never valid in JSON text)";
      return false;
    }
    const std::string text(body.empty() ? std::string_view("{}") : body);
    flex_builder.Clear();
    if (!flex.ParseFlexBuffer(text.c_str(), nullptr, &flex_builder)) {
      *error = "json: " + flex.error_;
      return false;
    }
    const auto root = flexbuffers::GetRoot(flex_builder.GetBuffer());
    if (!root.IsMap()) {
      *error = "body: must be a JSON object";
      return false;
    }
    *out = root.AsMap();
    return true;
  }

  void BuildOpenApi();
};

// ---- OpenAPI ----------------------------------------------------------------------------------

namespace {

constexpr std::string_view kRef = "#/components/schemas/";

std::string Ref(std::string_view name) {
  return R"({"$ref":")" + std::string(kRef) + std::string(name) + "\"}";
}

// The JSON Schema of one scalar, vector element or table of the schema, as FlatBuffers' JSON
// mapping (protocol/json.h) reads and prints it.
std::string TypeSchema(fb::BaseType t, const fb::Type& type) {
  if (type.enum_def != nullptr && t != fb::BASE_TYPE_UNION && t != fb::BASE_TYPE_UTYPE) {
    return Ref(type.enum_def->name);
  }
  switch (t) {
    case fb::BASE_TYPE_BOOL:
      return R"({"type":"boolean"})";
    case fb::BASE_TYPE_CHAR:
      return R"({"type":"integer","minimum":-128,"maximum":127})";
    case fb::BASE_TYPE_UCHAR:
      return R"({"type":"integer","minimum":0,"maximum":255})";
    case fb::BASE_TYPE_SHORT:
    case fb::BASE_TYPE_INT:
      return R"({"type":"integer","format":"int32"})";
    case fb::BASE_TYPE_USHORT:
    case fb::BASE_TYPE_UINT:
      return R"({"type":"integer","minimum":0,"maximum":4294967295})";
    case fb::BASE_TYPE_LONG:
      return R"({"type":"integer","format":"int64"})";
    case fb::BASE_TYPE_ULONG:
      return R"({"type":"integer","minimum":0})";
    case fb::BASE_TYPE_FLOAT:
    case fb::BASE_TYPE_DOUBLE:
      return R"({"type":"number"})";
    case fb::BASE_TYPE_STRING:
      return R"({"type":"string"})";
    case fb::BASE_TYPE_STRUCT:
      return Ref(type.struct_def->name);
    default:
      return "{}";
  }
}

std::string FieldSchema(const fb::FieldDef& f) {
  const fb::Type& type = f.value.type;
  if (type.base_type == fb::BASE_TYPE_UTYPE) {  // `<name>_type`: the member's name
    std::string out = R"({"type":"string","enum":[)";
    bool first = true;
    for (const fb::EnumVal* v : type.enum_def->Vals()) {
      if (v->name == "NONE") continue;
      if (!first) out += ',';
      first = false;
      out += JsonString(v->name);
    }
    return out + "]}";
  }
  if (type.base_type == fb::BASE_TYPE_UNION) {  // the member's table
    std::string out = R"({"oneOf":[)";
    bool first = true;
    for (const fb::EnumVal* v : type.enum_def->Vals()) {
      if (v->name == "NONE") continue;
      if (!first) out += ',';
      first = false;
      out += Ref(v->name);
    }
    return out + "]}";
  }
  if (type.base_type == fb::BASE_TYPE_VECTOR) {
    return R"({"type":"array","items":)" + TypeSchema(type.element, type) + "}";
  }
  std::string out = TypeSchema(type.base_type, type);
  // A scalar's default, when the schema sets one other than zero.
  if (fb::IsScalar(type.base_type) && !f.IsOptional() && f.value.constant != "0" &&
      type.base_type != fb::BASE_TYPE_BOOL) {
    std::string value = f.value.constant;
    if (type.enum_def != nullptr) {
      for (const fb::EnumVal* v : type.enum_def->Vals()) {
        if (std::to_string(v->GetAsInt64()) == f.value.constant) value = JsonString(v->name);
      }
    }
    out = R"({"allOf":[)" + out + R"(],"default":)" + value + "}";
  }
  return out;
}

std::string TableSchema(const fb::StructDef& s) {
  std::string props, required;
  for (const fb::FieldDef* f : s.fields.vec) {
    if (f->deprecated) continue;
    if (!props.empty()) props += ',';
    props += JsonString(f->name) + ":" + FieldSchema(*f);
    if (f->IsRequired()) {
      if (!required.empty()) required += ',';
      required += JsonString(f->name);
    }
  }
  std::string out = R"({"type":"object","additionalProperties":false,"properties":{)" + props + "}";
  if (!required.empty()) out += R"(,"required":[)" + required + "]";
  return out + "}";
}

std::string EnumSchema(const fb::EnumDef& e) {
  std::string out = R"({"type":"string","enum":[)";
  bool first = true;
  for (const fb::EnumVal* v : e.Vals()) {
    if (!first) out += ',';
    first = false;
    out += JsonString(v->name);
  }
  return out + "]}";
}

// The REST forms' bodies are not tables of the schema (a payload is a string or base64, metadata
// an object): their schemas are written here, beside the code that reads them (Route).
constexpr std::string_view kRestSchemas = R"(
"Bytes":{"oneOf":[{"type":"string","description":"UTF-8 text"},{"type":"object","additionalProperties":false,"required":["base64"],"properties":{"base64":{"type":"string","contentEncoding":"base64"}}}]},
"Pairs":{"type":"object","additionalProperties":{"type":"string"}},
"LeaseToken":{"oneOf":[{"type":"integer","minimum":0},{"type":"string","pattern":"^[0-9]+$"}]},
"HttpError":{"type":"object","required":["error"],"properties":{"error":{"$ref":"#/components/schemas/Error"}}},
"EnqueueBody":{"type":"object","additionalProperties":false,"properties":{"id":{"type":"string"},"payload":{"$ref":"#/components/schemas/Bytes"},"priority":{"type":"integer","format":"int64"},"metadata":{"$ref":"#/components/schemas/Pairs"},"delay_ms":{"type":"integer","format":"int64"},"depends_on":{"type":"array","maxItems":100000,"items":{"type":"string","description":"queue/id, or an id of this queue"}},"on_dependency_failure":{"$ref":"#/components/schemas/DependencyFailurePolicy"}}},
"Enqueued":{"type":"object","properties":{"id":{"type":"string"},"version":{"type":"integer"},"duplicate":{"type":"boolean"}}},
"DequeueBody":{"type":"object","additionalProperties":false,"properties":{"max":{"type":"integer","minimum":1,"maximum":1000,"default":1},"lease_ms":{"type":"integer","format":"int64"},"filter":{"$ref":"#/components/schemas/Pairs"},"wait_ms":{"type":"integer","minimum":0,"maximum":60000,"default":0},"include_dependency_results":{"type":"boolean","default":false}}},
"DependencyResult":{"type":"object","properties":{"id":{"type":"string","description":"queue/id"},"state":{"$ref":"#/components/schemas/MessageState"},"result":{"$ref":"#/components/schemas/Bytes"},"last_error":{"type":"string"},"error":{"$ref":"#/components/schemas/Error"}}},
"RestMessage":{"type":"object","properties":{"queue":{"type":"string"},"id":{"type":"string"},"priority":{"type":"integer"},"payload":{"$ref":"#/components/schemas/Bytes"},"metadata":{"$ref":"#/components/schemas/Pairs"},"state":{"$ref":"#/components/schemas/MessageState"},"attempts":{"type":"integer"},"max_attempts":{"type":"integer"},"visible_at":{"type":"integer"},"lease_token":{"type":"integer"},"lease_expires_at":{"type":"integer"},"version":{"type":"integer"},"enqueued_at":{"type":"integer"},"updated_at":{"type":"integer"},"last_error":{"type":"string"},"result":{"$ref":"#/components/schemas/Bytes"},"dependency_results":{"type":"array","items":{"$ref":"#/components/schemas/DependencyResult"}}}},
"Messages":{"type":"object","properties":{"messages":{"type":"array","items":{"$ref":"#/components/schemas/RestMessage"}}}},
"CompleteBody":{"type":"object","additionalProperties":false,"required":["lease_token"],"properties":{"lease_token":{"$ref":"#/components/schemas/LeaseToken"},"result":{"$ref":"#/components/schemas/Bytes"}}},
"FailBody":{"type":"object","additionalProperties":false,"required":["lease_token"],"properties":{"lease_token":{"$ref":"#/components/schemas/LeaseToken"},"error":{"type":"string"},"retry_delay_ms":{"type":"integer","format":"int64"}}},
"ExtendBody":{"type":"object","additionalProperties":false,"required":["lease_token","lease_ms"],"properties":{"lease_token":{"$ref":"#/components/schemas/LeaseToken"},"lease_ms":{"type":"integer","format":"int64"}}},
"Empty":{"type":"object"}
)";

std::string JsonContent(std::string_view schema) {
  return R"({"application/json":{"schema":)" + std::string(schema) + "}}";
}

// One operation of the document: `body` null for a GET.
std::string PathOperation(std::string_view id, std::string_view summary, std::string_view body,
                          std::string_view ok) {
  std::string out = R"({"operationId":)" + JsonString(id) + R"(,"summary":)" + JsonString(summary);
  if (!body.empty()) {
    out += R"(,"requestBody":{"required":false,"content":)" + JsonContent(body) + "}";
  }
  out +=
      R"(,"responses":{"200":{"description":"OK","content":)" + JsonContent(ok) +
      R"js(},"default":{"description":"a typed error (docs/http-api.md, Statuses)","content":)js" +
      JsonContent(Ref("HttpError")) + "}}}";
  return out;
}

constexpr std::string_view kQueueParam =
    R"({"name":"q","in":"path","required":true,"schema":{"type":"string"}})";
constexpr std::string_view kIdParam =
    R"({"name":"id","in":"path","required":true,"schema":{"type":"string"}})";

}  // namespace

void HttpApi::Impl::BuildOpenApi() {
  std::string schemas;
  for (const fb::StructDef* s : schema.structs_.vec) {
    if (!schemas.empty()) schemas += ',';
    schemas += JsonString(s->name) + ":" + TableSchema(*s);
  }
  for (const fb::EnumDef* e : schema.enums_.vec) {
    if (e->is_union) continue;
    schemas += "," + JsonString(e->name) + ":" + EnumSchema(*e);
  }
  schemas += ",";
  schemas += kRestSchemas;

  std::string paths;
  for (const OperationRow& row : OperationTable()) {
    if (!OverHttp(row)) continue;
    if (!paths.empty()) paths += ',';
    const std::string body = R"({"oneOf":[)" + Ref(row.name) + "," + Ref("Request") + "]}";
    // The generic form answers the whole Response, errors included.
    std::string op = PathOperation(row.name,
                                   "The " + std::string(row.name) +
                                       " operation (docs/protocol.md): the body is the op's table "
                                       "or a whole Request",
                                   body, Ref("Response"));
    paths += JsonString("/v1/" + std::string(row.name)) + R"(:{"post":)" + op + "}";
  }
  const std::string q = std::string(R"("parameters":[)") + std::string(kQueueParam) + "]";
  const std::string qid = std::string(R"("parameters":[)") + std::string(kQueueParam) + "," +
                          std::string(kIdParam) + "]";
  paths += R"(,"/v1/queues/{q}":{)" + q + R"(,"get":)" +
           PathOperation("getQueueRest", "One queue (GetQueue)", "", Ref("QueueInfo")) + "}";
  paths += R"(,"/v1/queues/{q}/messages":{)" + q + R"(,"post":)" +
           PathOperation("enqueueRest", "Enqueue one message (Enqueue)", Ref("EnqueueBody"),
                         Ref("Enqueued")) +
           "}";
  paths += R"(,"/v1/queues/{q}/dequeue":{)" + q + R"(,"post":)" +
           PathOperation("dequeueRest", "Lease messages, long-polling with wait_ms (Dequeue)",
                         Ref("DequeueBody"), Ref("Messages")) +
           "}";
  // The GET's query parameter: its path has no other method.
  const std::string qid_get =
      std::string(R"("parameters":[)") + std::string(kQueueParam) + "," + std::string(kIdParam) +
      R"(,{"name":"include_dependency_results","in":"query","required":false,"schema":{"type":"boolean","default":false}}])";
  paths += R"(,"/v1/queues/{q}/messages/{id}":{)" + qid_get + R"(,"get":)" +
           PathOperation("getRest",
                         "One message (Get); ?include_dependency_results=true adds its "
                         "dependencies' outcomes",
                         "", Ref("RestMessage")) +
           "}";
  paths += R"(,"/v1/queues/{q}/messages/{id}/complete":{)" + qid + R"(,"post":)" +
           PathOperation("completeRest", "Complete a leased message (Complete)",
                         Ref("CompleteBody"), Ref("Empty")) +
           "}";
  paths += R"(,"/v1/queues/{q}/messages/{id}/fail":{)" + qid + R"(,"post":)" +
           PathOperation("failRest", "Fail a leased message (Fail)", Ref("FailBody"),
                         Ref("FailResult")) +
           "}";
  paths += R"(,"/v1/queues/{q}/messages/{id}/extend":{)" + qid + R"(,"post":)" +
           PathOperation("extendRest", "Extend a lease (Extend)", Ref("ExtendBody"),
                         Ref("ExtendResult")) +
           "}";

#ifdef SUNDIAL_VERSION
  constexpr std::string_view kVersion = SUNDIAL_VERSION;
#else
  constexpr std::string_view kVersion = "0";
#endif
  openapi =
      R"({"openapi":"3.1.0","info":{"title":"Sundial HTTP JSON API","version":)" +
      JsonString(kVersion) +
      R"(,"description":"Generated from protocol/sundial.fbs by server/http_api.cc; see docs/http-api.md."},)"
      R"("security":[{"bearer":[]},{}],)"
      R"("components":{"securitySchemes":{"bearer":{"type":"http","scheme":"bearer"}},"schemas":{)" +
      schemas + "}},\"paths\":{" + paths + "}}";
}

HttpApi::HttpApi() : impl_(std::make_unique<Impl>()) {}
HttpApi::~HttpApi() = default;

bool HttpApi::Handles(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  return path == kPrefix || path.starts_with("/v1/");
}

HttpApiRoute HttpApi::Route(const HttpApiRequest& req, std::string_view auth_token) {
  HttpApiRoute route;
  auto refuse = [&](int status, Code code, std::string_view message) {
    route.response = ErrorResponse(status, code, message);
    return route;
  };
  auto method_not_allowed = [&](std::string_view allow) {
    route.response =
        ErrorResponse(405, Code::kInvalidArgument,
                      std::string(req.method) + ": this route takes " + std::string(allow));
    route.response.allow = allow;
    return route;
  };
  std::string_view path = req.target.substr(0, req.target.find('?'));
  path.remove_prefix(std::min(path.size(), kPrefix.size() + 1));
  const std::vector<std::string_view> seg = Segments(path);
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";

  // The document describes the API, not the data: it needs no token.
  if (seg.size() == 1 && seg[0] == "openapi.json") {
    if (!get) return method_not_allowed("GET");
    route.response.body = OpenApi();
    return route;
  }
  if (!auth_token.empty() && req.authorization != "Bearer " + std::string(auth_token)) {
    return refuse(401, Code::kUnauthenticated,
                  "auth: this server needs Authorization: Bearer TOKEN (--auth-token-file)");
  }

  fb::FlatBufferBuilder b(256 + req.body.size());
  std::string error;
  auto finish = [&](p::Operation type, fb::Offset<void> op, HttpReplyShape shape) {
    p::FinishRequestBuffer(b, p::CreateRequest(b, 0, p::Durability::durable, type, op));
    route.request.assign(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
    if (!p::VerifyRequest(route.request)) {
      return refuse(400, Code::kInvalidArgument, "body: beyond the request's limits");
    }
    route.dispatch = true;
    route.shape = shape;
    route.may_wait = MayWait(RequestOf(route.request));
    return route;
  };

  // POST /v1/<Operation>
  if (seg.size() == 1) {
    const OperationRow* row = RowNamed(seg[0]);
    if (row == nullptr || !OverHttp(*row)) {
      return refuse(404, Code::kNotFound,
                    "route: no operation \"" + std::string(seg[0]) +
                        "\" over HTTP (see GET /v1/openapi.json)");
    }
    if (!post) return method_not_allowed("POST");
    if (!impl_->ParseRequest(row->name, req.body, &route.request, &error)) {
      return refuse(400, Code::kInvalidArgument, error);
    }
    if (!p::VerifyRequest(route.request)) {
      return refuse(400, Code::kInvalidArgument, "body: beyond the request's limits");
    }
    const auto* request = fb::GetRoot<p::Request>(route.request.data());
    if (request->op() == nullptr) {
      return refuse(400, Code::kInvalidArgument, "body: the operation's table is missing");
    }
    if (request->op_type() != row->op) {
      return refuse(400, Code::kInvalidArgument,
                    "body: op_type " + std::string(p::EnumNameOperation(request->op_type())) +
                        " at /v1/" + std::string(row->name));
    }
    route.dispatch = true;
    route.shape = HttpReplyShape::kResponse;
    route.may_wait = MayWait(*request);
    return route;
  }

  if (seg.size() < 2 || seg[0] != "queues") {
    return refuse(404, Code::kNotFound, "route: no such route (see GET /v1/openapi.json)");
  }
  std::string queue, id;
  if (!DecodeSegment(seg[1], &queue) || (seg.size() >= 4 && !DecodeSegment(seg[3], &id))) {
    return refuse(400, Code::kInvalidArgument, "route: an empty or badly %-escaped segment");
  }
  const auto q = b.CreateString(queue);

  // GET /v1/queues/{q}
  if (seg.size() == 2) {
    if (!get) return method_not_allowed("GET");
    return finish(p::Operation::GetQueue, p::CreateGetQueue(b, q).Union(),
                  HttpReplyShape::kResultTable);
  }
  // GET /v1/queues/{q}/messages/{id}[?include_dependency_results=true]
  if (seg.size() == 4 && seg[2] == "messages") {
    if (!get) return method_not_allowed("GET");
    bool dependencies = false;
    if (!QueryFlag(req.target, "include_dependency_results", &dependencies, &error)) {
      return refuse(400, Code::kInvalidArgument, error);
    }
    return finish(p::Operation::Get, p::CreateGet(b, q, b.CreateString(id), dependencies).Union(),
                  HttpReplyShape::kMessage);
  }
  const bool enqueue = seg.size() == 3 && seg[2] == "messages";
  const bool dequeue = seg.size() == 3 && seg[2] == "dequeue";
  const bool item = seg.size() == 5 && seg[2] == "messages" &&
                    (seg[4] == "complete" || seg[4] == "fail" || seg[4] == "extend");
  if (!enqueue && !dequeue && !item) {
    return refuse(404, Code::kNotFound, "route: no such route (see GET /v1/openapi.json)");
  }
  if (!post) return method_not_allowed("POST");
  flexbuffers::Map map = flexbuffers::Map::EmptyMap();
  if (!impl_->ParseObject(req.body, &map, &error)) {
    return refuse(400, Code::kInvalidArgument, error);
  }
  const RestBody body(map);
  auto bad = [&] { return refuse(400, Code::kInvalidArgument, error); };

  if (enqueue) {
    std::string msg_id, payload, policy_name;
    int64_t priority = 0, delay_ms = 0;
    std::vector<std::pair<std::string, std::string>> metadata;
    std::vector<std::string> depends_on;
    if (!body.Only({"id", "payload", "priority", "metadata", "delay_ms", "depends_on",
                    "on_dependency_failure"},
                   &error) ||
        !body.String("id", &msg_id, &error) || !body.Payload("payload", &payload, &error) ||
        !body.Int("priority", &priority, &error) || !body.Pairs("metadata", &metadata, &error) ||
        !body.Int("delay_ms", &delay_ms, &error) ||
        !body.Strings("depends_on", &depends_on, &error) ||
        !body.String("on_dependency_failure", &policy_name, &error)) {
      return bad();
    }
    // The enum's names, as the schema spells them (one list: protocol/sundial.fbs).
    auto policy = p::DependencyFailurePolicy::cancel;
    if (body.Has("on_dependency_failure")) {
      bool known = false;
      for (const auto value : p::EnumValuesDependencyFailurePolicy()) {
        if (policy_name == p::EnumNameDependencyFailurePolicy(value)) {
          policy = value;
          known = true;
        }
      }
      if (!known) {
        error = "body: \"on_dependency_failure\" must be \"cancel\", \"release\" or \"error\"";
        return bad();
      }
    }
    const auto id_offset = b.CreateString(msg_id);
    const auto payload_offset = EncodeBytes(b, payload);
    const auto metadata_offset = EncodePairs(b, metadata);
    const auto depends_on_offset = depends_on.empty() ? 0 : b.CreateVectorOfStrings(depends_on);
    p::EnqueueItemBuilder built(b);
    built.add_id(id_offset);
    built.add_priority(priority);
    built.add_payload(payload_offset);
    built.add_metadata(metadata_offset);
    if (body.Has("delay_ms")) built.add_delay_ms(delay_ms);
    if (!depends_on.empty()) built.add_depends_on(depends_on_offset);
    built.add_on_dependency_failure(policy);
    const std::vector<fb::Offset<p::EnqueueItem>> items = {built.Finish()};
    return finish(p::Operation::Enqueue, p::CreateEnqueue(b, q, b.CreateVector(items)).Union(),
                  HttpReplyShape::kEnqueueOne);
  }
  if (dequeue) {
    uint64_t max = 1, wait_ms = 0;
    int64_t lease_ms = 0;
    bool dependencies = false;
    std::vector<std::pair<std::string, std::string>> filter;
    if (!body.Only({"max", "lease_ms", "filter", "wait_ms", "include_dependency_results"},
                   &error) ||
        !body.UInt("max", &max, &error) || !body.Int("lease_ms", &lease_ms, &error) ||
        !body.Pairs("filter", &filter, &error) || !body.UInt("wait_ms", &wait_ms, &error) ||
        !body.Bool("include_dependency_results", &dependencies, &error)) {
      return bad();
    }
    if (max > UINT32_MAX || wait_ms > UINT32_MAX) {
      error = "body: max and wait_ms are 32-bit";
      return bad();
    }
    const auto filter_offset = filter.empty() ? 0 : EncodePairs(b, filter);
    p::DequeueBuilder d(b);
    d.add_queue(q);
    d.add_max(static_cast<uint32_t>(max));
    if (body.Has("lease_ms")) d.add_lease_ms(lease_ms);
    if (!filter.empty()) d.add_filter(filter_offset);
    d.add_wait_ms(static_cast<uint32_t>(wait_ms));
    d.add_include_dependency_results(dependencies);
    return finish(p::Operation::Dequeue, d.Finish().Union(), HttpReplyShape::kMessages);
  }
  // .../messages/{id}/complete | fail | extend
  uint64_t token = 0;
  const auto id_offset = b.CreateString(id);
  if (seg[4] == "complete") {
    std::string result;
    if (!body.Only({"lease_token", "result"}, &error) ||
        !body.UInt("lease_token", &token, &error) || !body.Payload("result", &result, &error)) {
      return bad();
    }
    const auto result_offset = body.Has("result") ? EncodeBytes(b, result) : 0;
    const std::vector<fb::Offset<p::CompleteItem>> items = {
        p::CreateCompleteItem(b, id_offset, token, result_offset)};
    return finish(p::Operation::Complete, p::CreateComplete(b, q, b.CreateVector(items)).Union(),
                  HttpReplyShape::kItemStatus);
  }
  if (seg[4] == "fail") {
    std::string text;
    int64_t retry_delay_ms = 0;
    if (!body.Only({"lease_token", "error", "retry_delay_ms"}, &error) ||
        !body.UInt("lease_token", &token, &error) || !body.String("error", &text, &error) ||
        !body.Int("retry_delay_ms", &retry_delay_ms, &error)) {
      return bad();
    }
    const auto text_offset = b.CreateString(text);
    p::FailBuilder f(b);
    f.add_queue(q);
    f.add_id(id_offset);
    f.add_lease_token(token);
    f.add_error(text_offset);
    if (body.Has("retry_delay_ms")) f.add_retry_delay_ms(retry_delay_ms);
    return finish(p::Operation::Fail, f.Finish().Union(), HttpReplyShape::kResultTable);
  }
  int64_t lease_ms = 0;
  if (!body.Only({"lease_token", "lease_ms"}, &error) ||
      !body.UInt("lease_token", &token, &error) || !body.Int("lease_ms", &lease_ms, &error)) {
    return bad();
  }
  return finish(p::Operation::Extend, p::CreateExtend(b, q, id_offset, token, lease_ms).Union(),
                HttpReplyShape::kResultTable);
}

HttpApiResponse HttpApi::MapReply(HttpReplyShape shape, std::string_view server_message) {
  HttpApiResponse r;
  fb::Verifier verifier(reinterpret_cast<const uint8_t*>(server_message.data()),
                        server_message.size());
  const auto* message = verifier.VerifyBuffer<p::ServerMessage>(nullptr)
                            ? fb::GetRoot<p::ServerMessage>(server_message.data())
                            : nullptr;
  const p::Response* response = message ? message->body_as_Response() : nullptr;
  if (response == nullptr) {
    return ErrorResponse(500, Code::kInternal, "reply: not a Response");
  }
  const p::Error* error = response->error();
  if (shape == HttpReplyShape::kResponse) {
    r.status = error ? StatusOf(static_cast<Code>(error->code())) : 200;
    r.body = impl_->TableJson(response, "Response");
    return r;
  }
  auto typed_error = [&](const p::Error* e) {
    r.status = StatusOf(static_cast<Code>(e->code()));
    r.body = R"({"error":)" +
             ErrorJson(static_cast<Code>(e->code()), Str(e->message()), Str(e->primary())) + "}";
    return r;
  };
  if (error != nullptr) return typed_error(error);
  switch (shape) {
    case HttpReplyShape::kResponse:
      break;
    case HttpReplyShape::kEnqueueOne: {
      const auto* results = response->result_as_EnqueueResults();
      if (!results || !results->items() || results->items()->size() != 1) break;
      const p::EnqueueResult* item = results->items()->Get(0);
      if (item->error() != nullptr) return typed_error(item->error());
      r.body = R"({"id":)" + JsonString(Str(item->id())) + R"(,"version":)" +
               std::to_string(item->version()) + R"(,"duplicate":)" +
               (item->duplicate() ? "true" : "false") + "}";
      return r;
    }
    case HttpReplyShape::kMessages: {
      const auto* result = response->result_as_DequeueResult();
      if (!result) break;
      r.body = R"({"messages":[)";
      bool first = true;
      if (result->messages() != nullptr) {
        for (const p::Message* m : *result->messages()) {
          if (!first) r.body += ',';
          first = false;
          AppendMessage(*m, &r.body);
        }
      }
      r.body += "]}";
      return r;
    }
    case HttpReplyShape::kItemStatus: {
      const auto* results = response->result_as_ItemResults();
      if (!results || !results->items() || results->items()->size() != 1) break;
      const p::ItemStatus* item = results->items()->Get(0);
      if (item->code() != p::Code::OK) {
        r.status = StatusOf(static_cast<Code>(item->code()));
        r.body =
            R"({"error":)" + ErrorJson(static_cast<Code>(item->code()), Str(item->message())) + "}";
        return r;
      }
      r.body = "{}";
      return r;
    }
    case HttpReplyShape::kResultTable: {
      if (response->result() == nullptr || response->result_type() == p::Result::NONE) break;
      // The one table the result holds: QueueResult's queue, FailResult, ExtendResult.
      if (const auto* queue = response->result_as_QueueResult()) {
        if (!queue->queue()) break;
        r.body = impl_->TableJson(queue->queue(), "QueueInfo");
        return r;
      }
      r.body = impl_->TableJson(response->result(), p::EnumNameResult(response->result_type()));
      return r;
    }
    case HttpReplyShape::kMessage: {
      const auto* result = response->result_as_GetResult();
      if (!result || !result->message()) break;
      AppendMessage(*result->message(), &r.body);
      return r;
    }
  }
  return ErrorResponse(500, Code::kInternal, "reply: not the result this route expects");
}

const std::string& HttpApi::OpenApi() {
  if (impl_->openapi.empty()) impl_->BuildOpenApi();
  return impl_->openapi;
}

}  // namespace sundial::server
