// MessageTexts: byte strings that few messages carry, kept apart from the record and keyed by
// its MessageRef: a failed message's `last_error`, a completed message's `result`
// (docs/engine.md, "Per message"). A flag in the record says whether to look, so a message
// without one pays nothing and a lookup is made only when the flag is set.
//
// bytes() is the sum of the stored strings' lengths: what the memory budget counts for them
// (docs/semantics.md, "Memory budget"); allocated_bytes() what they really hold.
//
// Thread safety: none; guarded by the shard lock of its queue.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/unordered/unordered_flat_map.hpp>

#include "engine/message_store.h"

namespace sundial {

class MessageTexts {
 public:
  // Stores `text` for `ref` (replacing what was there); an empty text erases it. Returns the
  // change in bytes().
  int64_t Set(MessageRef ref, std::string_view text) {
    auto it = texts_.find(ref);
    const int64_t before = it == texts_.end() ? 0 : static_cast<int64_t>(it->second.size());
    if (text.empty()) {
      if (it != texts_.end()) texts_.erase(it);
    } else if (it != texts_.end()) {
      it->second.assign(text);
    } else {
      texts_.emplace(ref, std::string(text));
    }
    const int64_t delta = static_cast<int64_t>(text.size()) - before;
    bytes_ = static_cast<uint64_t>(static_cast<int64_t>(bytes_) + delta);
    return delta;
  }
  // Erases the text of `ref`, if any; returns the bytes freed.
  uint64_t Erase(MessageRef ref) { return static_cast<uint64_t>(-Set(ref, {})); }
  std::string_view Get(MessageRef ref) const {
    auto it = texts_.find(ref);
    return it == texts_.end() ? std::string_view() : std::string_view(it->second);
  }
  void Clear() {
    texts_.clear();
    bytes_ = 0;
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t allocated_bytes() const {
    uint64_t total = 0;
    for (const auto& [ref, text] : texts_) total += sizeof(ref) + sizeof(text) + text.capacity();
    return total;
  }

 private:
  boost::unordered_flat_map<MessageRef, std::string> texts_;
  uint64_t bytes_ = 0;
};

}  // namespace sundial
