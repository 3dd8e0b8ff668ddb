// Input validation for the engine's public operations: the limits of docs/semantics.md's
// Limits table. Pure functions, run before any lock is taken. Internal to engine/,
// except IsValidUtf8, which tools/ also uses.
#pragma once

#include <string_view>

#include "engine/status.h"
#include "engine/types.h"

namespace sundial {

inline constexpr int64_t kMaxLeaseMs = 43'200'000;            // 12 h
inline constexpr int64_t kMaxDurationMs = 3'153'600'000'000;  // 100 years
inline constexpr uint32_t kMaxAttemptsLimit = 1'000'000;

inline const Status kBadId = InvalidArgument("id: must be 1-128 bytes of valid UTF-8");

bool IsValidUtf8(std::string_view s);
bool IsValidQueueName(std::string_view name);
bool IsValidId(std::string_view id);
inline bool IsValidLease(int64_t ms) { return ms >= 1 && ms <= kMaxLeaseMs; }
inline bool IsValidDuration(int64_t ms) { return ms >= 0 && ms <= kMaxDurationMs; }

Status ValidateMetadata(const Metadata& metadata);
Status ValidateFilter(const Filter& filter);
// A flow-key value named by set_key_limits or get_key_limits (a metadata value's size).
Status ValidateKeyValue(std::string_view value);
Status ValidateSettings(const QueueSettings& settings, std::string_view queue_name);
// Everything about one enqueue item that does not depend on the queue.
Status ValidateItem(const EnqueueItem& item, size_t max_payload_bytes);

}  // namespace sundial
