#include "engine/validation.h"

#include <algorithm>
#include <cmath>

namespace sundial {

uint64_t RateMilliOf(double per_s) {
  constexpr uint64_t kRefused = kMaxRateMilli + 1;
  if (!std::isfinite(per_s) || per_s < 0 || per_s > static_cast<double>(kMaxRateMilli) / 1000) {
    return kRefused;
  }
  // 0.1 is not exact in binary: a rate is accepted when × 1000 it is an integer to within
  // rounding (far below one milli-token at every rate up to 1e6).
  const double milli = per_s * 1000;
  const double rounded = std::round(milli);
  return std::fabs(milli - rounded) <= 1e-6 ? static_cast<uint64_t>(rounded) : kRefused;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

bool IsValidQueueName(std::string_view name) {
  if (name.empty() || name.size() > kMaxQueueNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

bool IsValidId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxIdBytes && IsValidUtf8(id);
}

namespace {

Status ValidatePairs(const std::vector<MetadataPair>& pairs, const char* bad_key,
                     const char* bad_value, const char* duplicate) {
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& p = pairs[i];
    if (p.key.empty() || p.key.size() > kMaxMetadataKeyBytes || !IsValidUtf8(p.key)) {
      return InvalidArgument(bad_key);
    }
    if (p.value.size() > kMaxMetadataValueBytes || !IsValidUtf8(p.value)) {
      return InvalidArgument(bad_value);
    }
    for (size_t j = 0; j < i; ++j) {
      if (pairs[j].key == p.key) return InvalidArgument(duplicate);
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateMetadata(const Metadata& metadata) {
  if (metadata.size() > kMaxMetadataPairs) {
    return InvalidArgument("metadata: at most 16 pairs");
  }
  return ValidatePairs(metadata, "metadata: keys must be 1-64 bytes of valid UTF-8",
                       "metadata: values must be 0-256 bytes of valid UTF-8",
                       "metadata: keys must be unique");
}

Status ValidateFilter(const Filter& filter) {
  if (filter.size() > kMaxFilterPairs) return InvalidArgument("filter: at most 4 pairs");
  return ValidatePairs(filter, "filter: keys must be 1-64 bytes of valid UTF-8",
                       "filter: values must be 0-256 bytes of valid UTF-8",
                       "filter: keys must be unique");
}

Status ValidateKeyValue(std::string_view value) {
  if (value.size() > kMaxMetadataValueBytes) {
    return InvalidArgument("value: a flow-key value is at most 256 bytes");
  }
  return Status::Ok();
}

Status ValidateSettings(const QueueSettings& s, std::string_view queue_name) {
  if (s.type != QueueType::kSimple && s.type != QueueType::kExclusive) {
    return InvalidArgument("type: must be simple or exclusive");
  }
  if (s.type == QueueType::kExclusive) {
    if (s.exclusivity_key.empty() || s.exclusivity_key.size() > kMaxMetadataKeyBytes ||
        !IsValidUtf8(s.exclusivity_key)) {
      return InvalidArgument("exclusivity_key: exclusive queues need a key of 1-64 bytes");
    }
  } else if (!s.exclusivity_key.empty()) {
    return InvalidArgument("exclusivity_key: only exclusive queues have one");
  }
  if (!s.flow_key.empty() &&
      (s.flow_key.size() > kMaxMetadataKeyBytes || !IsValidUtf8(s.flow_key))) {
    return InvalidArgument("flow_key: must be a metadata key of 1-64 bytes");
  }
  if (s.type == QueueType::kExclusive) {
    if (!s.flow_key.empty() && s.flow_key != s.exclusivity_key) {
      return InvalidArgument("flow_key: an exclusive queue's flow key is its exclusivity_key");
    }
    if (s.key_concurrency > 1) {
      return InvalidArgument("key_concurrency: an exclusive queue runs one message per value");
    }
  } else if (s.key_concurrency > 0 && s.flow_key.empty()) {
    return InvalidArgument("key_concurrency: needs a flow_key");
  }
  if (s.key_concurrency > kMaxKeyConcurrency) {
    return InvalidArgument("key_concurrency: must be 0 (no limit) to 1000000");
  }
  if (s.key_rate_milli > kMaxRateMilli) {
    return InvalidArgument("key_rate_per_s: must be 0.001-1000000 with at most 3 decimals");
  }
  if (s.key_rate_milli != 0 && s.flow_key.empty() && s.type != QueueType::kExclusive) {
    return InvalidArgument("key_rate_per_s: needs a flow_key");
  }
  if (s.key_burst < 1 || s.key_burst > kMaxBurst) {
    return InvalidArgument("key_burst: must be 1-1000000");
  }
  if (s.rate_milli > kMaxRateMilli) {
    return InvalidArgument("rate_per_s: must be 0.001-1000000 with at most 3 decimals");
  }
  if (s.burst < 1 || s.burst > kMaxBurst) return InvalidArgument("burst: must be 1-1000000");
  if (!IsValidDuration(s.ttl_ms)) return InvalidArgument("ttl_ms: must be 0-3153600000000");
  if (s.dedupe != Dedupe::kKeep && s.dedupe != Dedupe::kWhileActive) {
    return InvalidArgument("dedupe: must be keep or while_active");
  }
  if (s.fairness != Fairness::kNone && s.fairness != Fairness::kWeighted) {
    return InvalidArgument("fairness: must be none or weighted");
  }
  if (s.fairness == Fairness::kWeighted && s.flow_key.empty() && s.type != QueueType::kExclusive) {
    return InvalidArgument("fairness: needs a flow_key");
  }
  if (!IsValidDuration(s.overdue_first_ms)) {
    return InvalidArgument("overdue_first_ms: must be 0-3153600000000");
  }
  if (s.overdue_first_ms != 0 && s.fairness != Fairness::kWeighted) {
    return InvalidArgument("overdue_first_ms: needs fairness weighted");
  }
  if (!IsValidLease(s.lease_ms)) return InvalidArgument("lease_ms: must be 1-43200000");
  if (!IsValidDuration(s.invisibility_ms)) {
    return InvalidArgument("invisibility_ms: must be 0-3153600000000");
  }
  if (s.max_attempts < 1 || s.max_attempts > kMaxAttemptsLimit) {
    return InvalidArgument("max_attempts: must be 1-1000000");
  }
  if (!IsValidDuration(s.retry_backoff_ms)) {
    return InvalidArgument("retry_backoff_ms: must be 0-3153600000000");
  }
  if (!IsValidDuration(s.retry_backoff_max_ms) || s.retry_backoff_max_ms < s.retry_backoff_ms) {
    return InvalidArgument("retry_backoff_max_ms: must be retry_backoff_ms-3153600000000");
  }
  if (!IsValidDuration(s.retention_ms)) {
    return InvalidArgument("retention_ms: must be 0-3153600000000");
  }
  if (s.history_max == 1 || s.history_max > kMaxHistoryEntries) {
    return InvalidArgument("history_max: must be 0 (off) or 2-1000");
  }
  if (!s.dead_letter_queue.empty()) {
    if (!IsValidQueueName(s.dead_letter_queue)) {
      return InvalidArgument("dead_letter_queue: not a valid queue name");
    }
    if (s.dead_letter_queue == queue_name) {
      return InvalidArgument("dead_letter_queue: a queue cannot be its own dead-letter queue");
    }
  }
  return Status::Ok();
}

Status ValidateItem(const EnqueueItem& item, size_t max_payload_bytes) {
  if (!item.id.empty() && !IsValidId(item.id)) return kBadId;
  if (item.payload.size() > max_payload_bytes) {
    return InvalidArgument("payload: larger than the server's max_payload_bytes");
  }
  if (Status s = ValidateMetadata(item.metadata); !s.ok()) return s;
  if (item.delay_ms && item.visible_at) {
    return InvalidArgument("delay_ms: give delay_ms or visible_at, not both");
  }
  if (item.delay_ms && !IsValidDuration(*item.delay_ms)) {
    return InvalidArgument("delay_ms: must be 0-3153600000000");
  }
  if (item.max_attempts && (*item.max_attempts < 1 || *item.max_attempts > kMaxAttemptsLimit)) {
    return InvalidArgument("max_attempts: must be 1-1000000");
  }
  if (item.ttl_ms && (*item.ttl_ms < 1 || !IsValidDuration(*item.ttl_ms))) {
    return InvalidArgument("ttl_ms: must be 1-3153600000000");
  }
  if (item.debounce_ms) {
    if (!IsValidDuration(*item.debounce_ms)) {
      return InvalidArgument("debounce_ms: must be 0-3153600000000");
    }
    if (item.id.empty()) return InvalidArgument("debounce_ms: needs an id");
    if (!item.depends_on.empty() || !item.batch.empty()) {
      return InvalidArgument("debounce_ms: not with depends_on or batch");
    }
  }
  return Status::Ok();
}

}  // namespace sundial
