// Packed metadata: the compact byte form in which the engine stores a message's metadata, and in
// which effects (and so the WAL) carry it.
//
//   packed   := count:u8 pair{count}
//   pair     := key_len:u8 value_len:u16le key:byte{key_len} value:byte{value_len}
//
// Pairs keep the order they were given in. PackedMetadataReader validates lengths, so it is safe
// on bytes read from disk: a malformed input makes Valid() false and yields no pairs past it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/types.h"

namespace sundial {

// Bytes the packed form of `metadata` takes.
size_t PackedMetadataSize(const Metadata& metadata);
// Appends the packed form to `out`. REQUIRES: at most 255 pairs, keys <= 255 and values <= 65535
// bytes (the engine validates the tighter limits of docs/semantics.md, "Limits", first).
void AppendPackedMetadata(const Metadata& metadata, std::string* out);
std::string PackMetadata(const Metadata& metadata);

class PackedMetadataReader {
 public:
  explicit PackedMetadataReader(std::string_view packed);
  // The next pair, or false at the end or on malformed input.
  bool Next(std::string_view* key, std::string_view* value);
  // True while no malformed byte has been met. Check after Next returned false.
  bool Valid() const { return valid_; }
  uint8_t count() const { return count_; }

 private:
  std::string_view rest_;
  uint8_t count_ = 0;
  uint8_t read_ = 0;
  bool valid_ = true;
};

// The number of pairs of a packed form the engine built or validated (its count byte).
inline uint32_t PackedPairCount(std::string_view packed) {
  return packed.empty() ? 0 : static_cast<uint8_t>(packed[0]);
}

// Decodes the whole packed form; nullopt when malformed.
std::optional<Metadata> UnpackMetadata(std::string_view packed);
// The value of `key`, if present.
std::optional<std::string_view> FindMetadataValue(std::string_view packed, std::string_view key);

}  // namespace sundial
