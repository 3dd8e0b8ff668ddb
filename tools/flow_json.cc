#include "tools/flow_json.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <limits>

namespace sundial::tools {
namespace {

namespace json = boost::json;
namespace p = protocol;

constexpr size_t kMaxDepth = 32;

bool ReadString(const json::value& v, std::string* out) {
  if (!v.is_string()) return false;
  *out = std::string(v.as_string());
  return true;
}

bool ReadInt(const json::value& v, int64_t* out) {
  if (!v.is_int64() && !v.is_uint64()) return false;
  if (v.is_uint64() && v.as_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return false;
  }
  *out = v.is_int64() ? v.as_int64() : static_cast<int64_t>(v.as_uint64());
  return true;
}

bool ReadNode(const json::value& v, const std::string& path, size_t depth, client::FlowNode* node,
              std::string* error);

bool ReadNodes(const json::value& v, const std::string& path, size_t depth,
               std::vector<client::FlowNode>* out, std::string* error) {
  if (depth > kMaxDepth) {
    *error = path + ": a flow is at most 32 levels deep";
    return false;
  }
  if (!v.is_array()) {
    *error = path + ": must be a list of nodes";
    return false;
  }
  for (size_t i = 0; i < v.as_array().size(); ++i) {
    if (!ReadNode(v.as_array()[i], path + "[" + std::to_string(i) + "]", depth,
                  &out->emplace_back(), error)) {
      return false;
    }
  }
  return true;
}

bool ReadNode(const json::value& v, const std::string& path, size_t depth, client::FlowNode* node,
              std::string* error) {
  if (!v.is_object()) {
    *error = path + ": a node must be an object";
    return false;
  }
  auto bad = [&](std::string_view key, std::string_view what) {
    *error = path + "." + std::string(key) + ": " + std::string(what);
    return false;
  };
  client::EnqueueItem& item = node->item;
  bool has_queue = false;
  for (const auto& [key, value] : v.as_object()) {
    int64_t n = 0;
    if (key == "queue") {
      if (!ReadString(value, &node->queue)) return bad(key, "must be a string");
      has_queue = true;
    } else if (key == "id") {
      if (!ReadString(value, &item.id)) return bad(key, "must be a string");
    } else if (key == "payload") {
      if (!ReadString(value, &item.payload)) return bad(key, "must be a string");
    } else if (key == "priority") {
      if (!ReadInt(value, &item.priority)) return bad(key, "must be an integer");
    } else if (key == "delay_ms") {
      if (!ReadInt(value, &n)) return bad(key, "must be an integer");
      item.delay_ms = n;
    } else if (key == "visible_at") {
      if (!ReadInt(value, &n)) return bad(key, "must be an integer");
      item.visible_at = n;
    } else if (key == "max_attempts") {
      if (!ReadInt(value, &n) || n < 0 || n > std::numeric_limits<uint32_t>::max()) {
        return bad(key, "must be an integer 1-1000000");
      }
      item.max_attempts = static_cast<uint32_t>(n);
    } else if (key == "metadata") {
      if (!value.is_object()) return bad(key, "must be an object of strings");
      for (const auto& [k, val] : value.as_object()) {
        if (!val.is_string()) return bad(key, "must be an object of strings");
        item.metadata.push_back({std::string(k), std::string(val.as_string())});
      }
    } else if (key == "depends_on") {
      if (!value.is_array()) return bad(key, "must be a list of strings");
      for (const json::value& entry : value.as_array()) {
        if (!entry.is_string()) return bad(key, "must be a list of strings");
        item.depends_on.emplace_back(entry.as_string());
      }
    } else if (key == "on_dependency_failure") {
      std::string name;
      if (!ReadString(value, &name)) return bad(key, "must be cancel, release or error");
      bool known = false;
      for (const auto policy : p::EnumValuesDependencyFailurePolicy()) {
        if (name == p::EnumNameDependencyFailurePolicy(policy)) {
          item.on_dependency_failure = policy;
          known = true;
        }
      }
      if (!known) return bad(key, "must be cancel, release or error");
    } else if (key == "batch") {
      if (!ReadString(value, &item.batch)) return bad(key, "must be a string");
    } else if (key == "children") {
      if (!ReadNodes(value, path + ".children", depth + 1, &node->children, error)) return false;
    } else {
      return bad(key, "unknown key");
    }
  }
  if (!has_queue) {
    *error = path + ": a node needs a queue";
    return false;
  }
  return true;
}

}  // namespace

bool FlowFromJson(std::string_view text, std::vector<client::FlowNode>* roots, std::string* error) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    *error = "not JSON: " + ec.message();
    return false;
  }
  roots->clear();
  if (v.is_object()) return ReadNode(v, "[0]", 1, &roots->emplace_back(), error);
  return ReadNodes(v, "", 1, roots, error);
}

}  // namespace sundial::tools
