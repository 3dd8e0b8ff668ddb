#include "engine/metadata.h"

namespace sundial {

size_t PackedMetadataSize(const Metadata& metadata) {
  size_t n = 1;
  for (const auto& p : metadata) n += 3 + p.key.size() + p.value.size();
  return n;
}

void AppendPackedMetadata(const Metadata& metadata, std::string* out) {
  out->push_back(static_cast<char>(metadata.size()));
  for (const auto& p : metadata) {
    out->push_back(static_cast<char>(p.key.size()));
    out->push_back(static_cast<char>(p.value.size() & 0xff));
    out->push_back(static_cast<char>(p.value.size() >> 8));
    out->append(p.key);
    out->append(p.value);
  }
}

std::string PackMetadata(const Metadata& metadata) {
  std::string out;
  out.reserve(PackedMetadataSize(metadata));
  AppendPackedMetadata(metadata, &out);
  return out;
}

PackedMetadataReader::PackedMetadataReader(std::string_view packed) : rest_(packed) {
  if (rest_.empty()) {
    valid_ = false;
    return;
  }
  count_ = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
}

bool PackedMetadataReader::Next(std::string_view* key, std::string_view* value) {
  if (!valid_ || read_ == count_) {
    if (valid_ && read_ == count_ && !rest_.empty()) valid_ = false;  // trailing bytes
    return false;
  }
  if (rest_.size() < 3) {
    valid_ = false;
    return false;
  }
  size_t key_len = static_cast<uint8_t>(rest_[0]);
  size_t value_len = static_cast<uint8_t>(rest_[1]) | (static_cast<uint8_t>(rest_[2]) << 8);
  if (rest_.size() < 3 + key_len + value_len) {
    valid_ = false;
    return false;
  }
  *key = rest_.substr(3, key_len);
  *value = rest_.substr(3 + key_len, value_len);
  rest_.remove_prefix(3 + key_len + value_len);
  ++read_;
  return true;
}

std::optional<Metadata> UnpackMetadata(std::string_view packed) {
  PackedMetadataReader reader(packed);
  Metadata out;
  std::string_view k, v;
  while (reader.Next(&k, &v)) out.push_back({std::string(k), std::string(v)});
  if (!reader.Valid()) return std::nullopt;
  return out;
}

std::optional<std::string_view> FindMetadataValue(std::string_view packed, std::string_view key) {
  PackedMetadataReader reader(packed);
  std::string_view k, v;
  while (reader.Next(&k, &v)) {
    if (k == key) return v;
  }
  return std::nullopt;
}

}  // namespace sundial
