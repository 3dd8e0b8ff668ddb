// The reference model: docs/semantics.md, rule by rule, with linear scans. See model.h.
#include "tests/engine/model.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <tuple>
#include <utility>

namespace sundial::model {
namespace {

constexpr size_t kNpos = static_cast<size_t>(-1);

std::optional<std::string_view> FindValue(const Metadata& metadata, std::string_view key) {
  for (const MetadataPair& pair : metadata) {
    if (pair.key == key) return std::string_view(pair.value);
  }
  return std::nullopt;
}

bool Matches(const Metadata& metadata, const Filter& filter) {
  for (const MetadataPair& pair : filter) {
    std::optional<std::string_view> value = FindValue(metadata, pair.key);
    if (!value || *value != pair.value) return false;
  }
  return true;
}

bool ValidPair(const MetadataPair& pair) {
  return !pair.key.empty() && pair.key.size() <= kMaxMetadataKeyBytes &&
         pair.value.size() <= kMaxMetadataValueBytes && IsValidUtf8(pair.key) &&
         IsValidUtf8(pair.value);
}

bool ValidMetadata(const Metadata& metadata) {
  if (metadata.size() > kMaxMetadataPairs) return false;
  for (size_t i = 0; i < metadata.size(); ++i) {
    if (!ValidPair(metadata[i])) return false;
    for (size_t j = 0; j < i; ++j) {
      if (metadata[j].key == metadata[i].key) return false;
    }
  }
  return true;
}

// Same key and value limits as metadata, keys unique.
bool ValidFilter(const Filter& filter, size_t min_pairs) {
  if (filter.size() < min_pairs || filter.size() > kMaxFilterPairs) return false;
  for (size_t i = 0; i < filter.size(); ++i) {
    if (!ValidPair(filter[i])) return false;
    for (size_t j = 0; j < i; ++j) {
      if (filter[j].key == filter[i].key) return false;
    }
  }
  return true;
}

bool ValidId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxIdBytes && IsValidUtf8(id);
}

bool ValidLeaseMs(int64_t ms) { return ms >= 1 && ms <= kMaxLeaseMs; }
bool ValidDelayMs(int64_t ms) { return ms >= 0 && ms <= kMaxDelayMs; }
bool ValidMaxAttempts(uint32_t n) { return n >= 1 && n <= kMaxAttemptsLimit; }

Metadata SortedPairs(Metadata metadata) {
  std::sort(metadata.begin(), metadata.end(), [](const MetadataPair& a, const MetadataPair& b) {
    return std::tie(a.key, a.value) < std::tie(b.key, b.value);
  });
  return metadata;
}

// (priority, seq): dequeue and browse order.
bool Before(const Model::Message& a, const Model::Message& b) {
  return std::make_pair(a.record.priority, a.seq) < std::make_pair(b.record.priority, b.seq);
}

const std::string& GateKeyOf(const QueueSettings& s) {
  return s.type == QueueType::kExclusive ? s.exclusivity_key : s.flow_key;
}

// The metadata key a gated queue limits (docs/semantics.md, "Flow control"): an exclusive
// queue's exclusivity_key, a simple queue's flow_key; none (empty) for other queues.
const std::string& GateKey(const Model::Queue& queue) { return GateKeyOf(queue.settings); }
// A value's override (set_key_limits), or null.
const KeyLimits* OverrideOf(const Model::Queue& queue, std::string_view value) {
  for (const auto& [v, limits] : queue.limits) {
    if (v == value) return &limits;
  }
  return nullptr;
}
// The limits in effect for a value under settings `s`: its override's fields, else the queue's.
uint32_t LimitOf(const QueueSettings& s, const KeyLimits* o) {
  if (s.type == QueueType::kExclusive) return 1;
  return o != nullptr && o->has(KeyLimits::kConcurrency) ? o->concurrency : s.key_concurrency;
}
uint64_t KeyRateOf(const QueueSettings& s, const KeyLimits* o) {
  return o != nullptr && o->has(KeyLimits::kRate) ? o->rate_milli : s.key_rate_milli;
}
uint32_t KeyBurstOf(const QueueSettings& s, const KeyLimits* o) {
  return o != nullptr && o->has(KeyLimits::kBurst) ? o->burst : s.key_burst;
}
uint32_t WeightOf(const KeyLimits* o) {
  return o != nullptr && o->has(KeyLimits::kWeight) ? o->weight : 1;
}
uint32_t LimitOf(const Model::Queue& queue, std::string_view value) {
  return LimitOf(queue.settings, OverrideOf(queue, value));
}
uint64_t KeyRateOf(const Model::Queue& queue, std::string_view value) {
  return KeyRateOf(queue.settings, OverrideOf(queue, value));
}
uint32_t KeyBurstOf(const Model::Queue& queue, std::string_view value) {
  return KeyBurstOf(queue.settings, OverrideOf(queue, value));
}

bool MissingGateKey(const Model::Queue& queue, const Metadata& metadata) {
  return !GateKey(queue).empty() && !FindValue(metadata, GateKey(queue));
}

std::optional<std::string_view> ExclusivityValue(const Model::Queue& queue,
                                                 const Model::Message& message) {
  if (GateKey(queue).empty()) return std::nullopt;
  return FindValue(message.record.metadata, GateKey(queue));
}

// How many messages of value `value` run, and the one whose lease ends first, by (expiry, seq).
size_t RunningOf(const Model::Queue& queue, std::string_view value,
                 const Model::Message** first = nullptr) {
  size_t n = 0;
  for (const Model::Message& m : queue.messages) {
    if (m.record.state != MessageState::kRunning) continue;
    std::optional<std::string_view> v = ExclusivityValue(queue, m);
    if (!v || *v != value) continue;
    ++n;
    if (first != nullptr &&
        (*first == nullptr ||
         std::make_pair(m.record.lease_expires_at, m.seq) <
             std::make_pair((*first)->record.lease_expires_at, (*first)->seq))) {
      *first = &m;
    }
  }
  return n;
}

// A pending message whose value runs its limit already (a scan: independent of the engine's
// KeyGate).
// ---- Token buckets (model.h, Bucket) ----
constexpr int64_t kMicro = 1'000'000;  // micro-tokens per token

// The credit of `b` (null: full) at `now`, in micro-tokens, under rate `rate` (> 0) and `burst`.
int64_t CreditAt(const Model::Bucket* b, uint64_t rate, uint32_t burst, TimeMs now) {
  const int64_t cap = static_cast<int64_t>(burst) * kMicro;
  if (b == nullptr) return cap;
  const auto r = static_cast<int64_t>(rate);
  const int64_t elapsed = now - b->at;
  if (b->tokens >= cap || elapsed > (cap - b->tokens) / r + 1) return cap;
  return std::min(cap, b->tokens + elapsed * r);
}

// The first time at which `b` holds a token (its state changes only at grants).
TimeMs FirstTokenAt(const Model::Bucket* b, uint64_t rate) {
  if (b == nullptr || b->tokens >= kMicro) return b == nullptr ? 0 : b->at;
  const auto r = static_cast<int64_t>(rate);
  return b->at + (kMicro - b->tokens + r - 1) / r;
}

void GrantFrom(std::optional<Model::Bucket>& b, uint64_t rate, uint32_t burst, TimeMs now) {
  const int64_t credit = CreditAt(b ? &*b : nullptr, rate, burst, now);
  b = Model::Bucket{credit - kMicro, now, 0};
}

// When `b` is (was, or will be) full, in µs, under `rate` (> 0) and `burst`: refilling from
// `at`, or since full_at_us when it was full at `at` already.
int64_t FullTimeUs(const Model::Bucket& b, uint64_t rate, uint32_t burst) {
  const int64_t missing = static_cast<int64_t>(burst) * kMicro - b.tokens;
  if (missing <= 0) return b.full_at_us;
  return b.at * 1000 + missing * 1000 / static_cast<int64_t>(rate);
}

// A rate or burst change at `now`: the time until full is kept (and, full already, since when).
void Rebucket(Model::Bucket& b, uint64_t old_rate, uint32_t old_burst, uint64_t new_rate,
              uint32_t new_burst, TimeMs now) {
  const int64_t full_at_us = old_rate != 0 ? FullTimeUs(b, old_rate, old_burst) : b.full_at_us;
  if (new_rate == 0) {
    b = Model::Bucket{0, now, full_at_us};
    return;
  }
  const int64_t until_full_us = std::max<int64_t>(0, full_at_us - now * 1000);
  b = Model::Bucket{static_cast<int64_t>(new_burst) * kMicro -
                        until_full_us * static_cast<int64_t>(new_rate) / 1000,
                    now, until_full_us == 0 ? full_at_us : 0};
}

const Model::Bucket* KeyBucket(const Model::Queue& queue, std::string_view value) {
  for (const auto& [v, b] : queue.key_buckets) {
    if (v == value) return &b;
  }
  return nullptr;
}

bool KeyHasToken(const Model::Queue& queue, std::string_view value, TimeMs now) {
  const uint64_t rate = KeyRateOf(queue, value);
  return rate == 0 ||
         CreditAt(KeyBucket(queue, value), rate, KeyBurstOf(queue, value), now) >= kMicro;
}

TimeMs LastStamp(const Model::Queue& queue);

// Throttled: in the list, and its token not back by the queue's latest stamp (every change of
// one of its messages refills, as a dequeue or Advance does: model.h, "Token buckets").
bool Throttled(const Model::Queue& queue, std::string_view value) {
  return std::find(queue.throttled.begin(), queue.throttled.end(), value) !=
             queue.throttled.end() &&
         !KeyHasToken(queue, value, LastStamp(queue));
}

// When the value's bucket is full, in µs (no bucket: long ago).
int64_t FullAtUs(const Model::Queue& queue, std::string_view value) {
  const Model::Bucket* b = KeyBucket(queue, value);
  if (b == nullptr) return 0;
  const uint64_t rate = KeyRateOf(queue, value);
  return rate == 0 ? b->full_at_us : FullTimeUs(*b, rate, KeyBurstOf(queue, value));
}

// The latest stamp of the queue's messages (model.h, "Per-value overrides").
TimeMs LastStamp(const Model::Queue& queue) {
  TimeMs latest = queue.stamp_floor;
  for (const Model::Message& m : queue.messages) latest = std::max(latest, m.record.updated_at);
  return latest;
}

// Whether the engine's gate knows the value: it has pending or running messages, or cools.
bool KeyPresent(const Model::Queue& queue, std::string_view value) {
  for (const Model::Message& m : queue.messages) {
    if (m.record.state != MessageState::kPending && m.record.state != MessageState::kRunning) {
      continue;
    }
    std::optional<std::string_view> v = FindValue(m.record.metadata, GateKey(queue));
    if (v && *v == value) return true;
  }
  return FullAtUs(queue, value) > LastStamp(queue) * 1000;
}

// Throttled values whose token is back by `now` (or by the latest stamp) are no longer
// throttled.
void RefillKeys(Model::Queue& queue, TimeMs now) {
  std::erase_if(queue.throttled, [&](const std::string& value) {
    return KeyHasToken(queue, value, std::max(now, LastStamp(queue)));
  });
}

void Throttle(Model::Queue& queue, std::string_view value) {
  if (std::find(queue.throttled.begin(), queue.throttled.end(), value) == queue.throttled.end()) {
    queue.throttled.emplace_back(value);
  }
}

bool KeyHeld(const Model::Queue& queue, std::string_view value) {
  const uint32_t limit = LimitOf(queue, value);
  return limit > 0 && RunningOf(queue, value) >= limit;
}

bool IsBlocked(const Model::Queue& queue, const Model::Message& message) {
  if (message.record.state != MessageState::kPending) return false;
  std::optional<std::string_view> value = ExclusivityValue(queue, message);
  return value && (KeyHeld(queue, *value) || Throttled(queue, *value));
}

// Counts a pending message that IsBlocked under its reason: held by its value's concurrency
// before out of tokens (the engine's order).
void CountBlocked(const Model::Queue& queue, const Model::Message& m, StateCounts* counts) {
  ++counts->blocked;
  if (KeyHeld(queue, *ExclusivityValue(queue, m))) {
    ++counts->blocked_concurrency;
  } else {
    ++counts->blocked_rate;
  }
}

// Fills the reason of a pending message that IsBlocked.
void ExplainBlocked(const Model::Queue& queue, const Model::Message& m, Explanation* e) {
  const std::string_view value = *ExclusivityValue(queue, m);
  if (!KeyHeld(queue, value)) {  // throttled: out of tokens below its concurrency
    e->reason = ExplainReason::kKeyRate;
    e->exclusivity_value = std::string(value);
    e->lease_token = 0;
    e->until = FirstTokenAt(KeyBucket(queue, value), KeyRateOf(queue, value));
    return;
  }
  const Model::Message* first = nullptr;
  e->key_running = static_cast<uint32_t>(RunningOf(queue, value, &first));
  e->key_concurrency = LimitOf(queue, value);
  e->reason = queue.settings.type == QueueType::kExclusive ? ExplainReason::kExclusivityHeld
                                                           : ExplainReason::kKeyConcurrency;
  e->exclusivity_value = std::string(value);
  e->lease_token = first->record.lease_token;
  e->until = first->record.lease_expires_at;
}

// Index of the message a dequeue with `filter` would lease next (ignoring pauses), or kNpos.
size_t SelectNext(const Model::Queue& queue, const Filter& filter) {
  size_t best = kNpos;
  for (size_t i = 0; i < queue.messages.size(); ++i) {
    const Model::Message& m = queue.messages[i];
    if (m.record.state != MessageState::kPending) continue;
    if (!Matches(m.record.metadata, filter)) continue;
    if (IsBlocked(queue, m)) continue;
    if (best == kNpos || Before(m, queue.messages[best])) best = i;
  }
  return best;
}

// ---- Fair share (model.h, "Fair share") ----

// The earliest pending message of each value with a dequeueable message (not held, not
// throttled): the heads a fair-share dequeue chooses among.
std::vector<size_t> ValueHeads(const Model::Queue& queue) {
  std::vector<size_t> heads;
  for (size_t i = 0; i < queue.messages.size(); ++i) {
    const Model::Message& m = queue.messages[i];
    if (m.record.state != MessageState::kPending || IsBlocked(queue, m)) continue;
    const std::string_view value = *ExclusivityValue(queue, m);
    auto same = std::find_if(heads.begin(), heads.end(), [&](size_t h) {
      return *ExclusivityValue(queue, queue.messages[h]) == value;
    });
    if (same == heads.end()) {
      heads.push_back(i);
    } else if (Before(m, queue.messages[*same])) {
      *same = i;
    }
  }
  return heads;
}

size_t Earliest(const Model::Queue& queue, const std::vector<size_t>& indexes) {
  return *std::min_element(indexes.begin(), indexes.end(), [&](size_t a, size_t b) {
    return Before(queue.messages[a], queue.messages[b]);
  });
}

// One value's turns in a fair-share dequeue: messages served in turn, and whether it had a
// dequeueable message and a token at every step.
struct Share {
  std::string value;
  uint64_t served = 0;
  bool always = true;
};

// The message a fair-share dequeue leases in turn at step `k`: the engine's k-th lease when the
// rules allow it (the head of a value with a token, no value two turns ahead of another that
// stayed dequeueable), else the earliest such head (the divergence then shows). kNpos: no value
// has a token. Values met without a token are added to `tokenless`.
size_t FairPick(const Model::Queue& queue, const std::vector<size_t>& heads,
                std::vector<Share>& shares, std::vector<std::string>& tokenless,
                const Model::FairChoices* fair, size_t k, TimeMs now) {
  std::vector<size_t> ready;
  auto value_of = [&](size_t h) { return *ExclusivityValue(queue, queue.messages[h]); };
  for (size_t h : heads) {
    if (KeyHasToken(queue, value_of(h), now)) {
      ready.push_back(h);
    } else if (std::find(tokenless.begin(), tokenless.end(), value_of(h)) == tokenless.end()) {
      tokenless.emplace_back(value_of(h));
    }
  }
  if (ready.empty()) return kNpos;
  const bool first = shares.empty();
  for (Share& share : shares) {
    share.always = share.always && std::any_of(ready.begin(), ready.end(), [&](size_t h) {
                     return value_of(h) == share.value;
                   });
  }
  for (size_t h : ready) {
    if (std::none_of(shares.begin(), shares.end(),
                     [&](const Share& share) { return share.value == value_of(h); })) {
      shares.push_back(Share{std::string(value_of(h)), 0, first});
    }
  }
  auto share_of = [&](std::string_view value) -> const Share& {
    return *std::find_if(shares.begin(), shares.end(),
                         [&](const Share& share) { return share.value == value; });
  };
  auto admissible = [&](size_t h) {
    const std::string_view v = value_of(h);
    const uint64_t served = share_of(v).served;
    const uint64_t wv = WeightOf(OverrideOf(queue, v));
    for (const Share& u : shares) {
      if (!u.always || u.value == v) continue;
      const uint64_t wu = WeightOf(OverrideOf(queue, u.value));
      // (served + 1) / wv <= u.served / wu + 2
      if ((served + 1) * wu > (u.served + 2 * wu) * wv) return false;
    }
    return true;
  };
  if (fair != nullptr && k < fair->leased.size()) {
    for (size_t h : ready) {
      if (queue.messages[h].record.id == fair->leased[k] && admissible(h)) return h;
    }
  }
  return Earliest(queue, ready);
}

size_t FindIndex(const Model::Queue& queue, std::string_view id) {
  for (size_t i = 0; i < queue.messages.size(); ++i) {
    if (queue.messages[i].record.id == id) return i;
  }
  return kNpos;
}

bool LeaseValid(const MessageRecord& r, uint64_t token, TimeMs now) {
  return r.state == MessageState::kRunning && r.lease_token == token && now < r.lease_expires_at;
}

// When the message's timer is due: visibility, lease expiry or retention GC.
std::optional<TimeMs> TimerDue(const Model::Message& m) {
  switch (m.record.state) {
    case MessageState::kInvisible:
      return m.record.visible_at;
    case MessageState::kRunning:
      return m.record.lease_expires_at;
    case MessageState::kCompleted:
    case MessageState::kCanceled:
    case MessageState::kErrored:
      return m.gc_at;
    case MessageState::kPending:
    case MessageState::kWaiting:  // released by its dependencies, not by a timer
      break;
  }
  return std::nullopt;
}

std::string EncodeCursor(int64_t priority, uint64_t seq) {
  return std::to_string(priority) + ":" + std::to_string(seq);
}

bool DecodeCursor(std::string_view cursor, int64_t* priority, uint64_t* seq) {
  size_t colon = cursor.find(':');
  if (colon == std::string_view::npos) return false;
  std::string_view p = cursor.substr(0, colon);
  std::string_view s = cursor.substr(colon + 1);
  if (p.empty() || s.empty()) return false;
  auto [pe, pec] = std::from_chars(p.data(), p.data() + p.size(), *priority);
  if (pec != std::errc() || pe != p.data() + p.size()) return false;
  auto [se, sec] = std::from_chars(s.data(), s.data() + s.size(), *seq);
  return sec == std::errc() && se == s.data() + s.size();
}

template <typename T>
std::vector<T> Repeat(size_t n, const T& value) {
  return std::vector<T>(n, value);
}

// A depends_on entry as a key "queue/id": "queue/id" when the part before the first '/' is a
// valid queue name (and an id follows), else an id of `own_queue`.
std::string ResolveEntry(std::string_view own_queue, std::string_view entry) {
  size_t slash = entry.find('/');
  if (slash != std::string_view::npos && slash + 1 < entry.size() &&
      IsValidQueueName(entry.substr(0, slash))) {
    return std::string(entry);
  }
  return std::string(own_queue) + "/" + std::string(entry);
}

std::pair<std::string, std::string> SplitEntryKey(std::string_view key) {
  size_t slash = key.find('/');
  return {std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

std::string Key(std::string_view queue, std::string_view id) {
  return std::string(queue) + "/" + std::string(id);
}

constexpr size_t kMaxDependencyEntries = 100'000;
constexpr size_t kMaxDependencyBytes = size_t{12} << 20;
constexpr size_t kMaxScheduleName = 100;
constexpr size_t kScheduleLimit = 100'000;
constexpr int64_t kMinEveryMs = 10;
constexpr TimeMs kMisfireGraceMs = 60'000;
constexpr size_t kCatchUpFires = 100;
constexpr TimeMs kCatchUpHorizonMs = TimeMs{400} * 86'400'000;

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
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
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) {
      return false;  // overlong
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

bool IsValidQueueName(std::string_view name) {
  if (name.empty() || name.size() > kMaxQueueNameBytes) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string TruncateUtf8(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t end = max_bytes;
  // Back off continuation bytes so the cut falls on the start of a sequence.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end));
}

uint64_t Model::PackedMetadataBytes(const Metadata& metadata) {
  uint64_t bytes = 1;
  for (const MetadataPair& pair : metadata) bytes += 3 + pair.key.size() + pair.value.size();
  return bytes;
}

uint64_t Model::AccountedBytes(const MessageRecord& record) {
  return kModelMessageOverheadBytes + record.id.size() + record.payload.size() +
         PackedMetadataBytes(record.metadata) + record.result.size();
}

std::pair<int64_t, int64_t> Model::BackoffRange(const QueueSettings& settings, uint32_t attempts) {
  int64_t cap = settings.retry_backoff_max_ms;
  int64_t d = settings.retry_backoff_ms;
  for (uint32_t i = 1; i < attempts && d < cap; ++i) d *= 2;  // d <= cap <= 100 years: no overflow
  d = std::min(d, cap);
  // floor(0.9 d), ceil(1.1 d)
  return {d * 9 / 10, (d * 11 + 9) / 10};
}

Model::Model(Options options, const Clock* clock) : options_(options), clock_(clock) {}

const Model::Queue* Model::FindQueue(std::string_view name) const {
  for (const Queue& q : queues_) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

Model::Queue* Model::MutableQueue(std::string_view name) {
  return const_cast<Queue*>(FindQueue(name));
}

uint64_t Model::AccountedBytes(const Message& message) {
  return AccountedBytes(message.record) + HistoryBytes(message.history);
}

uint64_t Model::memory_bytes() const {
  uint64_t total = 0;
  for (const Queue& q : queues_) {
    for (const Message& m : q.messages) total += AccountedBytes(m);
  }
  return total;
}

QueueInfo Model::Info(const Queue& queue, TimeMs now) const {
  QueueInfo info;
  info.name = queue.name;
  info.settings = queue.settings;
  for (const Message& m : queue.messages) {
    ++info.counts.by_state[static_cast<size_t>(m.record.state)];
    if (IsBlocked(queue, m)) CountBlocked(queue, m, &info.counts);
    info.memory_bytes += AccountedBytes(m);
  }
  size_t head = SelectNext(queue, {});
  if (head != kNpos) info.oldest_pending_age_ms = now - queue.messages[head].record.enqueued_at;
  return info;
}

// An enqueue item's own fields (enqueue and each flow node check them first).
Status Model::ValidateItem(const EnqueueItem& item) const {
  if (!item.id.empty() && !ValidId(item.id)) return InvalidArgument("id");
  if (item.payload.size() > options_.max_payload_bytes) return InvalidArgument("payload");
  if (!ValidMetadata(item.metadata)) return InvalidArgument("metadata");
  if (item.delay_ms && item.visible_at) return InvalidArgument("delay_ms and visible_at");
  if (item.delay_ms && !ValidDelayMs(*item.delay_ms)) return InvalidArgument("delay_ms");
  if (item.max_attempts && !ValidMaxAttempts(*item.max_attempts)) {
    return InvalidArgument("max_attempts");
  }
  if (item.ttl_ms && (*item.ttl_ms < 1 || !ValidDelayMs(*item.ttl_ms))) {
    return InvalidArgument("ttl_ms");
  }
  if (item.debounce_ms) {
    if (!ValidDelayMs(*item.debounce_ms) || item.id.empty()) return InvalidArgument("debounce_ms");
    if (!item.depends_on.empty() || !item.batch.empty()) return InvalidArgument("debounce_ms");
  }
  return Status::Ok();
}

Status Model::ValidateSettings(std::string_view name, const QueueSettings& s) const {
  if (s.type == QueueType::kSimple && !s.exclusivity_key.empty()) {
    return InvalidArgument("exclusivity_key");
  }
  if (s.type == QueueType::kExclusive &&
      (s.exclusivity_key.empty() || s.exclusivity_key.size() > kMaxExclusivityKeyBytes ||
       !IsValidUtf8(s.exclusivity_key))) {
    return InvalidArgument("exclusivity_key");
  }
  if (!s.flow_key.empty() &&
      (s.flow_key.size() > kMaxExclusivityKeyBytes || !IsValidUtf8(s.flow_key))) {
    return InvalidArgument("flow_key");
  }
  if (s.type == QueueType::kExclusive &&
      ((!s.flow_key.empty() && s.flow_key != s.exclusivity_key) || s.key_concurrency > 1)) {
    return InvalidArgument("flow_key/key_concurrency of an exclusive queue");
  }
  if (s.type == QueueType::kSimple && s.key_concurrency > 0 && s.flow_key.empty()) {
    return InvalidArgument("key_concurrency without flow_key");
  }
  if (s.key_concurrency > 1'000'000) return InvalidArgument("key_concurrency");
  if (s.key_rate_milli > kMaxRateMilli || (s.key_rate_milli != 0 && GateKeyOf(s).empty())) {
    return InvalidArgument("key_rate_per_s");
  }
  if (s.key_burst < 1 || s.key_burst > kMaxBurst) return InvalidArgument("key_burst");
  if (s.rate_milli > kMaxRateMilli) return InvalidArgument("rate_per_s");
  if (s.burst < 1 || s.burst > kMaxBurst) return InvalidArgument("burst");
  if (!ValidLeaseMs(s.lease_ms)) return InvalidArgument("lease_ms");
  if (!ValidDelayMs(s.invisibility_ms)) return InvalidArgument("invisibility_ms");
  if (!ValidMaxAttempts(s.max_attempts)) return InvalidArgument("max_attempts");
  if (!ValidDelayMs(s.retry_backoff_ms)) return InvalidArgument("retry_backoff_ms");
  // The cap may not be below the base. Not in docs/semantics.md's table; the engine enforces it.
  if (!ValidDelayMs(s.retry_backoff_max_ms) || s.retry_backoff_max_ms < s.retry_backoff_ms) {
    return InvalidArgument("retry_backoff_max_ms");
  }
  if (!ValidDelayMs(s.retention_ms)) return InvalidArgument("retention_ms");
  if (!ValidDelayMs(s.ttl_ms)) return InvalidArgument("ttl_ms");
  if (s.dedupe != Dedupe::kKeep && s.dedupe != Dedupe::kWhileActive) {
    return InvalidArgument("dedupe");
  }
  if (s.fairness != Fairness::kNone &&
      (s.fairness != Fairness::kWeighted || GateKeyOf(s).empty())) {
    return InvalidArgument("fairness");
  }
  if (!ValidDelayMs(s.overdue_first_ms) ||
      (s.overdue_first_ms != 0 && s.fairness != Fairness::kWeighted)) {
    return InvalidArgument("overdue_first_ms");
  }
  if (s.history_max == 1 || s.history_max > kMaxHistoryEntries) {
    return InvalidArgument("history_max");
  }
  if (!s.dead_letter_queue.empty() &&
      (!IsValidQueueName(s.dead_letter_queue) || s.dead_letter_queue == name)) {
    return InvalidArgument("dead_letter_queue");
  }
  return Status::Ok();
}

// ---- Queues -----------------------------------------------------------------------------------

Result<QueueInfo> Model::CreateQueue(std::string_view name, const QueueSettings& settings) {
  TimeMs now = clock_->NowMs();
  if (!IsValidQueueName(name)) return InvalidArgument("name");
  if (Status s = ValidateSettings(name, settings); !s.ok()) return s;
  if (const Queue* existing = FindQueue(name)) {
    if (existing->settings == settings) return Info(*existing, now);
    return AlreadyExists("queue");
  }
  // A dead-letter queue must exist (semantics.md gives no code; the engine says NOT_FOUND).
  if (!settings.dead_letter_queue.empty() && FindQueue(settings.dead_letter_queue) == nullptr) {
    return NotFound("dead_letter_queue");
  }
  queues_.push_back(Queue{std::string(name), settings, 1, {}, {}, {}, {}, 0, {}, 0});
  return Info(queues_.back(), now);
}

Result<QueueInfo> Model::UpdateQueue(std::string_view name, const QueueSettingsUpdate& update) {
  TimeMs now = clock_->NowMs();
  if (!IsValidQueueName(name)) return InvalidArgument("name");
  Queue* queue = MutableQueue(name);
  if (queue == nullptr) return NotFound("queue");
  QueueSettings s = queue->settings;
  if (update.lease_ms) s.lease_ms = *update.lease_ms;
  if (update.invisibility_ms) s.invisibility_ms = *update.invisibility_ms;
  if (update.max_attempts) s.max_attempts = *update.max_attempts;
  if (update.retry_backoff_ms) s.retry_backoff_ms = *update.retry_backoff_ms;
  if (update.retry_backoff_max_ms) s.retry_backoff_max_ms = *update.retry_backoff_max_ms;
  if (update.dead_letter_queue) s.dead_letter_queue = *update.dead_letter_queue;
  if (update.retention_ms) s.retention_ms = *update.retention_ms;
  if (update.max_depth) s.max_depth = *update.max_depth;
  if (update.enqueue_paused) s.enqueue_paused = *update.enqueue_paused;
  if (update.dequeue_paused) s.dequeue_paused = *update.dequeue_paused;
  if (update.history_max) s.history_max = *update.history_max;
  if (update.key_concurrency) s.key_concurrency = *update.key_concurrency;
  if (update.ttl_ms) s.ttl_ms = *update.ttl_ms;
  if (update.dedupe) s.dedupe = *update.dedupe;
  if (update.key_rate_milli) s.key_rate_milli = *update.key_rate_milli;
  if (update.key_burst) s.key_burst = *update.key_burst;
  if (update.rate_milli) s.rate_milli = *update.rate_milli;
  if (update.burst) s.burst = *update.burst;
  if (update.fairness) s.fairness = *update.fairness;
  if (update.overdue_first_ms) s.overdue_first_ms = *update.overdue_first_ms;
  if (Status st = ValidateSettings(name, s); !st.ok()) return st;
  // Only a dead-letter queue that changes must exist: a queue whose dead-letter queue was
  // deleted can still be updated.
  if (s == queue->settings) return Info(*queue, now);
  if (update.dead_letter_queue && !update.dead_letter_queue->empty() &&
      *update.dead_letter_queue != queue->settings.dead_letter_queue &&
      FindQueue(*update.dead_letter_queue) == nullptr) {
    return NotFound("dead_letter_queue");
  }
  // The buckets as they are (model.h, Bucket); throttled values are checked again.
  const QueueSettings& o = queue->settings;
  if (queue->bucket && (o.rate_milli != s.rate_milli || o.burst != s.burst)) {
    Rebucket(*queue->bucket, o.rate_milli, o.burst, s.rate_milli, s.burst, now);
  }
  if (o.key_rate_milli != s.key_rate_milli || o.key_burst != s.key_burst) {
    for (auto& [value, b] : queue->key_buckets) {
      const KeyLimits* limits = OverrideOf(*queue, value);  // an override's fields stay as they are
      const uint64_t old_rate = KeyRateOf(o, limits), new_rate = KeyRateOf(s, limits);
      const uint32_t old_burst = KeyBurstOf(o, limits), new_burst = KeyBurstOf(s, limits);
      if (old_rate != new_rate || old_burst != new_burst) {
        Rebucket(b, old_rate, old_burst, new_rate, new_burst, now);
      }
    }
    queue->throttled.clear();
  }
  queue->settings = s;
  queue->queue_refill = 0;  // checked again at the next dequeue
  return Info(*queue, now);
}

// ---- Per-key limits (docs/semantics.md, "Per-key limits")
// ----------------------------------------

std::optional<std::string> Model::ValueOf(std::string_view queue_name, std::string_view id) const {
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return std::nullopt;
  const size_t index = FindIndex(*queue, id);
  if (index == kNpos) return std::nullopt;
  std::optional<std::string_view> value = ExclusivityValue(*queue, queue->messages[index]);
  return value ? std::optional<std::string>(*value) : std::nullopt;
}

bool Model::Dequeueable(std::string_view queue_name, std::string_view value) const {
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return false;
  for (size_t h : ValueHeads(*queue)) {
    if (*ExclusivityValue(*queue, queue->messages[h]) == value) return true;
  }
  return false;
}

KeyInfo Model::DescribeKey(const Queue& queue, std::string_view value, TimeMs now) const {
  KeyInfo info;
  info.value = std::string(value);
  const KeyLimits* o = OverrideOf(queue, value);
  if (o != nullptr) info.overrides = *o;
  info.concurrency = LimitOf(queue.settings, o);
  info.rate_milli = KeyRateOf(queue.settings, o);
  info.burst = KeyBurstOf(queue.settings, o);
  info.weight = WeightOf(o);
  if (!KeyPresent(queue, value)) return info;
  for (const Message& m : queue.messages) {
    std::optional<std::string_view> v = ExclusivityValue(queue, m);
    if (!v || *v != value) continue;
    if (m.record.state == MessageState::kPending) ++info.pending;
    if (m.record.state == MessageState::kRunning) ++info.running;
  }
  info.held = KeyHeld(queue, value);
  if (!KeyHasToken(queue, value, now)) {
    info.next_token = FirstTokenAt(KeyBucket(queue, value), info.rate_milli);
  }
  return info;
}

Result<KeyInfo> Model::SetKeyLimits(std::string_view queue_name, std::string_view value,
                                    const KeyLimits& limits) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  if (GateKey(*queue).empty()) return FailedPrecondition("queue: no flow_key");
  if (value.size() > kMaxMetadataValueBytes) return InvalidArgument("value");
  if ((limits.set & ~KeyLimits::kAll) != 0) return InvalidArgument("key limits");
  if (limits.has(KeyLimits::kConcurrency) &&
      (queue->settings.type == QueueType::kExclusive || limits.concurrency > kMaxKeyConcurrency)) {
    return InvalidArgument("concurrency");
  }
  if (limits.has(KeyLimits::kRate) && limits.rate_milli > kMaxRateMilli) {
    return InvalidArgument("rate_per_s");
  }
  if (limits.has(KeyLimits::kBurst) && (limits.burst < 1 || limits.burst > kMaxBurst)) {
    return InvalidArgument("burst");
  }
  if (limits.has(KeyLimits::kWeight) && (limits.weight < 1 || limits.weight > kMaxKeyWeight)) {
    return InvalidArgument("weight");
  }
  const KeyLimits* old = OverrideOf(*queue, value);
  if (!limits.empty() && old == nullptr && queue->limits.size() >= kMaxKeyOverrides) {
    return ResourceExhausted("key limits");
  }
  const TimeMs now = clock_->NowMs();
  if ((old == nullptr ? KeyLimits{} : *old) == limits) return DescribeKey(*queue, value, now);
  // The bucket as it is, under the value's new rate and burst (no refill, no reset).
  const QueueSettings& s = queue->settings;
  for (auto& [v, b] : queue->key_buckets) {
    if (v != value) continue;
    const KeyLimits* now_limits = limits.empty() ? nullptr : &limits;
    if (KeyRateOf(s, old) != KeyRateOf(s, now_limits) ||
        KeyBurstOf(s, old) != KeyBurstOf(s, now_limits)) {
      Rebucket(b, KeyRateOf(s, old), KeyBurstOf(s, old), KeyRateOf(s, now_limits),
               KeyBurstOf(s, now_limits), now);
    }
  }
  std::erase(queue->throttled, std::string(value));  // checked again at the next dequeue
  std::erase_if(queue->limits, [&](const auto& entry) { return entry.first == value; });
  if (!limits.empty()) queue->limits.emplace_back(std::string(value), limits);
  return DescribeKey(*queue, value, now);
}

Result<KeyInfo> Model::GetKeyLimits(std::string_view queue_name, std::string_view value) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (value.size() > kMaxMetadataValueBytes) return InvalidArgument("value");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  if (GateKey(*queue).empty()) return FailedPrecondition("queue: no flow_key");
  return DescribeKey(*queue, value, clock_->NowMs());
}

Result<std::vector<KeyInfo>> Model::ListKeys(std::string_view queue_name, KeyOrder order,
                                             uint32_t limit) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (limit < 1 || limit > 1000) return InvalidArgument("limit");
  if (order > KeyOrder::kThrottled) return InvalidArgument("order");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  if (GateKey(*queue).empty()) return FailedPrecondition("queue: no flow_key");
  // Every value the queue knows: its messages', its buckets', its overrides'.
  std::vector<std::string> values;
  auto add = [&values](std::string_view v) {
    if (std::find(values.begin(), values.end(), v) == values.end()) values.emplace_back(v);
  };
  for (const Message& m : queue->messages) {
    if (std::optional<std::string_view> v = ExclusivityValue(*queue, m)) add(*v);
  }
  for (const auto& [v, b] : queue->key_buckets) add(v);
  for (const auto& [v, l] : queue->limits) add(v);
  const TimeMs now = clock_->NowMs();
  std::vector<KeyInfo> keys;
  for (const std::string& v : values) {
    if (KeyPresent(*queue, v) || OverrideOf(*queue, v) != nullptr) {
      keys.push_back(DescribeKey(*queue, v, now));
    }
  }
  auto rank = [order](const KeyInfo& k) {
    switch (order) {
      case KeyOrder::kRunning:
        return std::make_pair(uint64_t{0}, uint64_t{k.running});
      case KeyOrder::kThrottled:  // out of tokens first, then by pending
        return std::make_pair(uint64_t{k.next_token != 0}, k.pending);
      case KeyOrder::kPending:
        break;
    }
    return std::make_pair(uint64_t{0}, k.pending);
  };
  std::sort(keys.begin(), keys.end(), [&](const KeyInfo& a, const KeyInfo& b) {
    return rank(a) != rank(b) ? rank(a) > rank(b) : a.value < b.value;
  });
  if (keys.size() > limit) keys.resize(limit);
  return keys;
}

Result<QueueInfo> Model::GetQueue(std::string_view name) const {
  if (!IsValidQueueName(name)) return InvalidArgument("name");
  const Queue* queue = FindQueue(name);
  if (queue == nullptr) return NotFound("queue");
  return Info(*queue, clock_->NowMs());
}

std::vector<QueueInfo> Model::ListQueues() const {
  TimeMs now = clock_->NowMs();
  std::vector<QueueInfo> out;
  for (const Queue& q : queues_) out.push_back(Info(q, now));
  std::sort(out.begin(), out.end(),
            [](const QueueInfo& a, const QueueInfo& b) { return a.name < b.name; });
  return out;
}

Status Model::DeleteQueue(std::string_view name) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  if (!IsValidQueueName(name)) return InvalidArgument("name");
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].name == name) {
      Queue gone = std::move(queues_[i]);
      queues_.erase(queues_.begin() + static_cast<ptrdiff_t>(i));
      DependenciesRemoved(gone.name, std::move(gone.messages), clock_->NowMs());
      return Status::Ok();
    }
  }
  return NotFound("queue");
}

Result<uint64_t> Model::PurgeQueue(std::string_view name, const std::vector<MessageState>& states) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  if (!IsValidQueueName(name)) return InvalidArgument("name");
  if (states.empty() || states.size() > kStateCount) return InvalidArgument("states");
  Queue* queue = MutableQueue(name);
  if (queue == nullptr) return NotFound("queue");
  std::vector<Message> kept, removed;
  for (Message& m : queue->messages) {
    if (std::find(states.begin(), states.end(), m.record.state) != states.end()) {
      queue->stamp_floor = std::max(queue->stamp_floor, m.record.updated_at);
      removed.push_back(std::move(m));
    } else {
      kept.push_back(std::move(m));
    }
  }
  queue->messages = std::move(kept);
  const uint64_t count = removed.size();
  DependenciesRemoved(queue->name, std::move(removed), clock_->NowMs());
  return count;
}

// ---- Enqueue ----------------------------------------------------------------------------------

std::vector<Result<EnqueueResult>> Model::Enqueue(std::string_view queue,
                                                  std::vector<EnqueueItem> items,
                                                  const std::vector<std::string>& generated_ids) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  const size_t n = items.size();
  if (n == 0 || n > kMaxBatchItems) {
    return Repeat<Result<EnqueueResult>>(n, InvalidArgument("batch size"));
  }
  if (!IsValidQueueName(queue)) return Repeat<Result<EnqueueResult>>(n, InvalidArgument("queue"));
  size_t queue_index = kNpos;
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].name == queue) queue_index = i;
  }
  if (queue_index == kNpos) {
    if (!options_.auto_create_queues) return Repeat<Result<EnqueueResult>>(n, NotFound("queue"));
    queues_.push_back(Queue{std::string(queue), QueueSettings{}, 1, {}, {}, {}, {}, 0, {}, 0});
    queue_index = queues_.size() - 1;
  }
  TimeMs now = clock_->NowMs();
  std::vector<Result<EnqueueResult>> results;
  for (size_t i = 0; i < n; ++i) {
    std::string generated;
    if (items[i].id.empty()) {
      if (i < generated_ids.size() && !generated_ids[i].empty()) {
        generated = generated_ids[i];
      } else {
        // Generated ids are 26-character ULIDs: the placeholder has that length too, so the
        // memory budget check sees the same bytes.
        std::string n = std::to_string(++placeholder_counter_);
        generated = "~" + std::string(25 - n.size(), '0') + n;
      }
    }
    results.push_back(EnqueueOne(queue_index, items[i], generated, now));
  }
  return results;
}

Result<EnqueueResult> Model::EnqueueOne(size_t queue_index, const EnqueueItem& item,
                                        const std::string& generated_id, TimeMs now, bool forced) {
  Queue& queue = queues_[queue_index];
  // 2. Validation.
  if (Status v = ValidateItem(item); !v.ok()) return v;
  // depends_on: its form, then (state) every entry names an existing message.
  if (item.depends_on.size() > kMaxDependencyEntries) return InvalidArgument("depends_on");
  std::vector<std::string> keys;
  size_t key_bytes = 0;
  for (const std::string& entry : item.depends_on) {
    keys.push_back(ResolveEntry(queue.name, entry));
    auto [dq, did] = SplitEntryKey(keys.back());
    if (!IsValidQueueName(dq) || !ValidId(did)) return InvalidArgument("depends_on");
    key_bytes += keys.back().size();
  }
  if (key_bytes > kMaxDependencyBytes) return InvalidArgument("depends_on");
  std::vector<Message*> named;
  for (const std::string& key : keys) {
    auto [dq, did] = SplitEntryKey(key);
    Queue* q = MutableQueue(dq);
    size_t index = q == nullptr ? kNpos : FindIndex(*q, did);
    if (index == kNpos) return NotFound("depends_on: no such message");
    named.push_back(&q->messages[index]);
  }
  // The batch: open, unless the message exists (a repeat answers as any and joins nothing).
  const size_t found = item.id.empty() ? kNpos : FindIndex(queue, item.id);
  // Dedupe while_active releases a terminal message's id, unless it is in the dependency graph
  // or the item depends on it.
  const bool releasable =
      found != kNpos && queue.settings.dedupe == Dedupe::kWhileActive &&
      IsTerminal(queue.messages[found].record.state) && !queue.messages[found].in_graph &&
      std::find(keys.begin(), keys.end(), Key(queue.name, item.id)) == keys.end();
  if (!item.batch.empty() && (found == kNpos || releasable)) {
    const BatchInfo* batch = MutableBatch(item.batch);
    if (batch == nullptr) return NotFound("batch: no such batch");
    if (batch->sealed) return FailedPrecondition("batch: sealed");
  }
  if (MissingGateKey(queue, item.metadata)) return InvalidArgument("gate key missing");
  const std::string id = item.id.empty() ? generated_id : item.id;
  // 3. Duplicate; debounce and dedupe while_active (docs/semantics.md, "Debounce", "Releasing
  // ids: dedupe while_active").
  bool release = false;
  if (size_t index = FindIndex(queue, id); index != kNpos) {
    const MessageState state = queue.messages[index].record.state;
    if (item.debounce_ms) {
      if (state == MessageState::kPending || state == MessageState::kInvisible) {
        return Debounce(queue, index, item, now);
      }
      if (state == MessageState::kRunning) {
        return EnqueueResult{id, queue.messages[index].record.version, true};
      }
    }
    release = releasable;
  }
  if (size_t index = release ? kNpos : FindIndex(queue, id); index != kNpos) {
    const MessageRecord& existing = queue.messages[index].record;
    bool same = existing.priority == item.priority && existing.payload == item.payload &&
                SortedPairs(existing.metadata) == SortedPairs(item.metadata) &&
                (!item.max_attempts || *item.max_attempts == existing.max_attempts);
    if (!same) return AlreadyExists("id");
    return EnqueueResult{id, existing.version, true};
  }
  // 4. Pause.
  if (!forced && queue.settings.enqueue_paused) return FailedPrecondition("enqueue_paused");
  // 5. Depth.
  if (!forced && queue.settings.max_depth > 0) {
    uint64_t live = 0;
    for (const Message& m : queue.messages) live += IsTerminal(m.record.state) ? 0 : 1;
    if (live >= queue.settings.max_depth) return ResourceExhausted("max_depth");
  }
  Message message;
  MessageRecord& r = message.record;
  r.queue = queue.name;
  r.id = id;
  r.priority = item.priority;
  r.payload = item.payload;
  r.metadata = item.metadata;
  // 6. Memory budget.
  if (!forced && options_.memory_budget_bytes > 0 &&
      memory_bytes() + AccountedBytes(r) > options_.memory_budget_bytes) {
    return ResourceExhausted("memory budget");
  }
  r.attempts = 0;
  r.max_attempts = item.max_attempts.value_or(queue.settings.max_attempts);
  r.version = 1;
  r.enqueued_at = now;
  r.updated_at = now;
  TimeMs visible_at = item.visible_at
                          ? *item.visible_at
                          : now + item.delay_ms.value_or(queue.settings.invisibility_ms);
  if (item.debounce_ms) visible_at = std::max(visible_at, now + *item.debounce_ms);
  const int64_t ttl = item.ttl_ms.value_or(queue.settings.ttl_ms);
  r.expires_at = ttl > 0 ? now + ttl : 0;
  Message released;  // the terminal message of this id goes first (removed, as by retention)
  if (release) {
    const size_t index = FindIndex(queue, id);
    released = std::move(queue.messages[index]);
    Remove(queue, index);
    // The dependencies named, found again (the vector moved); one that was the released
    // message itself keeps the state it had.
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [dq, did] = SplitEntryKey(keys[i]);
      Queue* q = MutableQueue(dq);
      const size_t at = FindIndex(*q, did);
      named[i] = at == kNpos ? &released : &q->messages[at];
    }
  }
  if (!keys.empty()) {
    // Waiting; `get` shows the visible_at it will have once released (0: at once).
    r.state = MessageState::kWaiting;
    r.visible_at = visible_at > now ? visible_at : 0;
  } else if (visible_at > now) {
    r.state = MessageState::kInvisible;
    r.visible_at = visible_at;
  } else {
    r.state = MessageState::kPending;
    r.visible_at = 0;
  }
  // The dependencies as they are now: completed ones count as done, and so do failed ones
  // under the release policy; the first other failed one applies the policy at once.
  std::string failure;
  for (size_t i = 0; i < keys.size(); ++i) {
    const MessageState s = named[i]->record.state;
    const bool failed = s == MessageState::kCanceled || s == MessageState::kErrored;
    const bool finished =
        s == MessageState::kCompleted ||
        (failed && item.on_dependency_failure == DependencyFailurePolicy::kRelease);
    message.dependencies.push_back(Dependency{keys[i], named[i]->uid, finished});
    named[i]->in_graph = true;
    if (failed && !finished && failure.empty()) {
      failure = "dependency " + keys[i] + (s == MessageState::kErrored ? " errored" : " canceled");
    }
  }
  message.policy = item.on_dependency_failure;
  message.in_graph = !keys.empty() || !item.batch.empty();
  if (!item.batch.empty()) {
    message.batch = item.batch;
    MutableBatch(item.batch)->counts.members += 1;
  }
  message.uid = next_uid_++;
  message.seq = queue.next_seq++;
  queue.messages.push_back(std::move(message));
  Message& added = queue.messages.back();
  RecordHistory(queue, added, HistoryEvent::kEnqueued, added.record.state, now);
  if (!keys.empty()) {
    bool all_finished = std::all_of(added.dependencies.begin(), added.dependencies.end(),
                                    [](const Dependency& d) { return d.finished; });
    if (all_finished) {
      Release(queue, added, now);
    } else if (!failure.empty()) {
      // It has no dependents yet: nothing follows.
      added.record.last_error = failure;
      added.record.version += 1;
      added.record.updated_at = now;
      MakeTerminal(queue, queue.messages.size() - 1,  // a dependent: in the graph, kept
                   item.on_dependency_failure == DependencyFailurePolicy::kError
                       ? MessageState::kErrored
                       : MessageState::kCanceled,
                   now);
      RecordHistory(queue, added, HistoryEvent::kDependencyFailed, MessageState::kWaiting, now, 0,
                    added.record.last_error);
    }
  }
  return EnqueueResult{id, 1, false};
}

Result<EnqueueResult> Model::Debounce(Queue& queue, size_t index, const EnqueueItem& item,
                                      TimeMs now) {
  Message& m = queue.messages[index];
  MessageRecord& r = m.record;
  MessageRecord replaced = r;
  replaced.payload = item.payload;
  replaced.metadata = item.metadata;
  const uint64_t before = AccountedBytes(r);
  const uint64_t after = AccountedBytes(replaced);
  if (options_.memory_budget_bytes > 0 && after > before &&
      memory_bytes() + (after - before) > options_.memory_budget_bytes) {
    return ResourceExhausted("memory budget");
  }
  const MessageState from = r.state;
  const TimeMs current = from == MessageState::kInvisible ? r.visible_at : now;
  const TimeMs visible_at = std::max(current, now + *item.debounce_ms);
  r.payload = item.payload;
  r.metadata = item.metadata;
  r.state = visible_at > now ? MessageState::kInvisible : MessageState::kPending;
  r.visible_at = visible_at > now ? visible_at : 0;
  r.version += 1;
  r.updated_at = now;
  RecordHistory(queue, m, HistoryEvent::kDebounced, from, now);
  return EnqueueResult{r.id, r.version, false};
}

uint64_t Model::ExpireDue(Queue& queue, TimeMs now) {
  uint64_t expired = 0;
  while (true) {
    // The pending or invisible message whose ttl ran out first (expires_at, then seq).
    size_t next = kNpos;
    std::pair<TimeMs, uint64_t> next_key{};
    for (size_t i = 0; i < queue.messages.size(); ++i) {
      const MessageRecord& r = queue.messages[i].record;
      if (r.state != MessageState::kPending && r.state != MessageState::kInvisible) continue;
      if (r.expires_at == 0 || r.expires_at > now) continue;
      std::pair<TimeMs, uint64_t> key{r.expires_at, queue.messages[i].seq};
      if (next == kNpos || key < next_key) {
        next = i;
        next_key = key;
      }
    }
    if (next == kNpos) return expired;
    ++expired;
    Message& m = queue.messages[next];
    const MessageState from = m.record.state;
    const uint64_t uid = m.uid;
    const std::string key = Key(queue.name, m.record.id);
    m.record.version += 1;
    m.record.updated_at = now;
    m.record.last_error = "expired";
    if (MakeTerminal(queue, next, MessageState::kCanceled, now)) continue;  // removed
    RecordHistory(queue, queue.messages[next], HistoryEvent::kExpired, from, now);
    DependencyFailed(uid, key, "canceled", now);
  }
}

// ---- Dequeue and lease operations -------------------------------------------------------------

Result<std::vector<MessageRecord>> Model::Dequeue(std::string_view queue_name,
                                                  const DequeueRequest& request,
                                                  const std::vector<uint64_t>& lease_tokens,
                                                  const FairChoices* fair) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (request.max < 1 || request.max > kMaxDequeueCount) return InvalidArgument("max");
  if (request.lease_ms && !ValidLeaseMs(*request.lease_ms)) return InvalidArgument("lease_ms");
  if (request.worker_id.size() > kMaxWorkerIdBytes || !IsValidUtf8(request.worker_id)) {
    return InvalidArgument("worker_id");
  }
  if (!ValidFilter(request.filter, 0)) return InvalidArgument("filter");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  CallbackFlush flush(this);  // an expired batch member may make its batch done
  std::vector<MessageRecord> leased;
  if (queue->settings.dequeue_paused) return leased;
  TimeMs now = clock_->NowMs();
  ExpireDue(*queue, now);  // no delivery after expiry, even when the timer is late
  int64_t lease_ms = request.lease_ms.value_or(queue->settings.lease_ms);
  RefillKeys(*queue, now);
  if (queue->queue_refill != 0 && queue->queue_refill <= now) queue->queue_refill = 0;
  const QueueSettings& settings = queue->settings;
  // Fair share (model.h): an unfiltered dequeue of a weighted queue.
  const bool fair_share = settings.fairness == Fairness::kWeighted && request.filter.empty();
  std::vector<Share> shares;
  std::vector<std::string> tokenless;  // values met without a token
  bool visited_all = false;            // it stopped for want of a value with a token
  for (uint32_t k = 0; k < request.max;) {
    // The queue's token first, then the key's (semantics.md, "Rates").
    if (settings.rate_milli != 0 && CreditAt(queue->bucket ? &*queue->bucket : nullptr,
                                             settings.rate_milli, settings.burst, now) < kMicro) {
      queue->queue_refill = FirstTokenAt(&*queue->bucket, settings.rate_milli);
      break;
    }
    size_t index = kNpos;
    bool in_turn = false;
    if (!fair_share) {
      index = SelectNext(*queue, request.filter);
    } else if (std::vector<size_t> heads = ValueHeads(*queue); heads.empty()) {
      visited_all = true;
    } else if (const size_t first = Earliest(*queue, heads);
               settings.overdue_first_ms != 0 &&
               queue->messages[first].record.priority < now - settings.overdue_first_ms) {
      index = first;  // overdue: out of turn
    } else {
      index = FairPick(*queue, heads, shares, tokenless, fair, k, now);
      visited_all = index == kNpos;
      in_turn = true;
    }
    if (index == kNpos) break;
    const std::optional<std::string_view> value = ExclusivityValue(*queue, queue->messages[index]);
    if (value && !KeyHasToken(*queue, *value, now)) {
      Throttle(*queue, *value);
      continue;
    }
    if (value && KeyRateOf(*queue, *value) != 0) {
      auto it = std::find_if(queue->key_buckets.begin(), queue->key_buckets.end(),
                             [&](const auto& entry) { return entry.first == *value; });
      std::optional<Bucket> b;
      if (it != queue->key_buckets.end()) b = it->second;
      GrantFrom(b, KeyRateOf(*queue, *value), KeyBurstOf(*queue, *value), now);
      if (it != queue->key_buckets.end()) {
        it->second = *b;
      } else {
        queue->key_buckets.emplace_back(std::string(*value), *b);
      }
      if (!KeyHasToken(*queue, *value, now)) Throttle(*queue, *value);
    }
    if (in_turn) {
      for (Share& share : shares) share.served += share.value == *value ? 1 : 0;
    }
    if (settings.rate_milli != 0)
      GrantFrom(queue->bucket, settings.rate_milli, settings.burst, now);
    MessageRecord& r = queue->messages[index].record;
    const MessageState from = r.state;
    r.state = MessageState::kRunning;
    r.attempts += 1;
    r.version += 1;
    r.lease_token = k < lease_tokens.size() ? lease_tokens[k] : kMaxLeaseToken - k;
    r.lease_expires_at = now + lease_ms;
    r.visible_at = 0;
    r.updated_at = now;
    RecordHistory(*queue, queue->messages[index], HistoryEvent::kLeased, from, now, r.lease_token,
                  request.worker_id);
    leased.push_back(r);
    ++k;
  }
  // Values without a token: a dequeue that ran out of candidates visited (and throttled) every
  // one; one that stopped early, those the engine says it did.
  for (const std::string& v : tokenless) {
    if (Throttled(*queue, v) || KeyHasToken(*queue, v, now)) continue;
    if (visited_all || (fair != nullptr && fair->throttled && fair->throttled(v))) {
      Throttle(*queue, v);
    }
  }
  return leased;
}

std::vector<Status> Model::Complete(std::string_view queue_name,
                                    const std::vector<CompleteItem>& items) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  const size_t n = items.size();
  if (n == 0 || n > kMaxBatchItems) return Repeat(n, InvalidArgument("batch size"));
  if (!IsValidQueueName(queue_name)) return Repeat(n, InvalidArgument("queue"));
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return Repeat(n, NotFound("queue"));
  TimeMs now = clock_->NowMs();
  std::vector<Status> out;
  for (const CompleteItem& item : items) {
    if (!ValidId(item.id)) {
      out.push_back(InvalidArgument("id"));
      continue;
    }
    if (item.result.size() > options_.max_result_bytes) {
      out.push_back(InvalidArgument("result"));
      continue;
    }
    size_t index = FindIndex(*queue, item.id);
    if (index == kNpos) {
      out.push_back(NotFound("id"));
      continue;
    }
    Message& m = queue->messages[index];
    MessageRecord& r = m.record;
    // A repeat of the complete that succeeded: success, and the first result stays.
    if (r.state == MessageState::kCompleted && r.lease_token == item.lease_token) {
      out.push_back(Status::Ok());
      continue;
    }
    if (!LeaseValid(r, item.lease_token, now)) {
      out.push_back(FailedPrecondition("lease"));
      continue;
    }
    r.version += 1;
    r.updated_at = now;
    r.result = item.result;
    const uint64_t uid = m.uid;
    const uint64_t token = r.lease_token;
    if (!MakeTerminal(*queue, index, MessageState::kCompleted, now)) {  // keeps the token
      RecordHistory(*queue, queue->messages[index], HistoryEvent::kCompleted,
                    MessageState::kRunning, now, token);
      DependencyCompleted(uid, now);
    }
    out.push_back(Status::Ok());
  }
  return out;
}

void Model::Remove(Queue& queue, size_t index) {
  queue.stamp_floor = std::max(queue.stamp_floor, queue.messages[index].record.updated_at);
  queue.messages.erase(queue.messages.begin() + static_cast<ptrdiff_t>(index));
}

bool Model::MakeTerminal(Queue& queue, size_t index, MessageState state, TimeMs now) {
  if (!queue.messages[index].batch.empty()) FinishMember(queue.messages[index], state, now);
  // Retention 0: removed by the operation that made it terminal, unless it is in the dependency
  // graph (semantics.md, "Retention").
  if (queue.settings.retention_ms == 0 && !queue.messages[index].in_graph) {
    Remove(queue, index);
    return true;
  }
  Message& message = queue.messages[index];
  message.record.state = state;
  message.record.visible_at = 0;
  message.record.lease_expires_at = 0;
  if (state != MessageState::kCompleted) message.record.lease_token = 0;
  message.gc_at = now + queue.settings.retention_ms;
  return false;
}

std::string Model::ErrorOrDeadLetter(Queue& queue, size_t index, TimeMs now, HistoryEvent event,
                                     uint64_t lease_token, TimeMs stamped_before) {
  Message& m = queue.messages[index];
  // Errored here, or moved (gone from here): either way a failed dependency.
  const uint64_t uid = m.uid;
  const std::string key = Key(queue.name, m.record.id);
  const std::string& dlq_name = queue.settings.dead_letter_queue;
  Queue* dlq = dlq_name.empty() ? nullptr : MutableQueue(dlq_name);
  bool can_move = dlq != nullptr && dlq != &queue && FindIndex(*dlq, m.record.id) == kNpos &&
                  !MissingGateKey(*dlq, m.record.metadata);
  if (!can_move) {
    if (!MakeTerminal(queue, index, MessageState::kErrored, now)) {
      Message& errored = queue.messages[index];
      RecordHistory(queue, errored, event, MessageState::kRunning, now, lease_token,
                    event == HistoryEvent::kFailed ? errored.record.last_error : std::string());
      DependencyFailed(uid, key, "errored", now);
    }
    return "";
  }
  if (!m.batch.empty()) FinishMember(m, MessageState::kErrored, now);  // moved: errored
  Message moved = std::move(m);
  moved.in_graph = false;       // a new message of the dead-letter queue (Queue::MoveToDeadLetter)
  moved.record.expires_at = 0;  // a dead-letter move does not carry the ttl (semantics.md)
  // The move does not stamp this queue: its latest stamp is the message's before the fail.
  queue.stamp_floor = std::max(queue.stamp_floor, stamped_before);
  queue.messages.erase(queue.messages.begin() + static_cast<ptrdiff_t>(index));
  MessageRecord& r = moved.record;
  r.queue = dlq->name;
  r.state = MessageState::kPending;
  r.attempts = 0;
  r.max_attempts = dlq->settings.max_attempts;
  r.visible_at = 0;
  r.lease_token = 0;
  r.lease_expires_at = 0;
  // An existing x-origin-queue pair is dropped and the new one goes last (semantics.md says
  // "replacing"; the position is the engine's choice).
  std::erase_if(r.metadata, [](const MetadataPair& p) { return p.key == kOriginQueueKey; });
  r.metadata.push_back(MetadataPair{std::string(kOriginQueueKey), queue.name});
  moved.seq = dlq->next_seq++;
  moved.gc_at = 0;
  moved.uid = next_uid_++;  // another message: its completion releases nothing
  moved.dependencies.clear();
  dlq->messages.push_back(std::move(moved));
  // It takes its history along and gets a dead_lettered entry there.
  Message& arrived = dlq->messages.back();
  RecordHistory(*dlq, arrived, HistoryEvent::kDeadLettered, MessageState::kRunning, now,
                lease_token, arrived.record.last_error);
  std::string moved_to = dlq->name;
  DependencyFailed(uid, key, "errored", now);
  return moved_to;
}

Result<FailResult> Model::Fail(std::string_view queue_name, const FailRequest& request,
                               const ChooseBackoff& choose_backoff) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(request.id)) return InvalidArgument("id");
  if (request.retry_delay_ms && !ValidDelayMs(*request.retry_delay_ms)) {
    return InvalidArgument("retry_delay_ms");
  }
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, request.id);
  if (index == kNpos) return NotFound("id");
  TimeMs now = clock_->NowMs();
  MessageRecord& r = queue->messages[index].record;
  if (!LeaseValid(r, request.lease_token, now)) return FailedPrecondition("lease");
  r.last_error = TruncateUtf8(request.error, kMaxErrorBytes);
  const uint64_t token = r.lease_token;
  const TimeMs stamped_before = r.updated_at;
  r.lease_token = 0;
  r.lease_expires_at = 0;
  r.version += 1;
  r.updated_at = now;
  FailResult result;
  if (r.attempts >= r.max_attempts) {
    result.state = MessageState::kErrored;
    result.dead_letter_queue =
        ErrorOrDeadLetter(*queue, index, now, HistoryEvent::kFailed, token, stamped_before);
    return result;
  }
  int64_t delay;
  if (request.retry_delay_ms) {
    delay = *request.retry_delay_ms;
  } else {
    auto [lo, hi] = BackoffRange(queue->settings, r.attempts);
    delay = choose_backoff ? choose_backoff(lo, hi) : lo;
  }
  if (delay == 0) {
    r.state = MessageState::kPending;
    r.visible_at = 0;
    result.state = MessageState::kPending;
  } else {
    r.state = MessageState::kInvisible;
    r.visible_at = now + delay;
    result.state = MessageState::kInvisible;
    result.visible_at = r.visible_at;
  }
  RecordHistory(*queue, queue->messages[index], HistoryEvent::kFailed, MessageState::kRunning, now,
                token, r.last_error);
  return result;
}

Result<TimeMs> Model::Extend(std::string_view queue_name, std::string_view id, uint64_t lease_token,
                             int64_t lease_ms) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  if (!ValidLeaseMs(lease_ms)) return InvalidArgument("lease_ms");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  TimeMs now = clock_->NowMs();
  MessageRecord& r = queue->messages[index].record;
  if (!LeaseValid(r, lease_token, now)) return FailedPrecondition("lease");
  r.lease_expires_at = now + lease_ms;
  r.version += 1;
  r.updated_at = now;
  RecordHistory(*queue, queue->messages[index], HistoryEvent::kExtended, MessageState::kRunning,
                now, lease_token);
  return r.lease_expires_at;
}

// ---- Cancel, reprioritize, redrive ------------------------------------------------------------

std::vector<Status> Model::Cancel(std::string_view queue_name,
                                  const std::vector<std::string>& ids) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  const size_t n = ids.size();
  if (n == 0 || n > kMaxBatchItems) return Repeat(n, InvalidArgument("batch size"));
  if (!IsValidQueueName(queue_name)) return Repeat(n, InvalidArgument("queue"));
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return Repeat(n, NotFound("queue"));
  TimeMs now = clock_->NowMs();
  std::vector<Status> out;
  for (const std::string& id : ids) {
    if (!ValidId(id)) {
      out.push_back(InvalidArgument("id"));
      continue;
    }
    size_t index = FindIndex(*queue, id);
    if (index == kNpos) {
      out.push_back(NotFound("id"));
      continue;
    }
    Message& m = queue->messages[index];
    switch (m.record.state) {
      case MessageState::kCanceled:
        out.push_back(Status::Ok());
        break;
      case MessageState::kCompleted:
      case MessageState::kErrored:
        out.push_back(FailedPrecondition("state"));
        break;
      case MessageState::kInvisible:
      case MessageState::kPending:
      case MessageState::kRunning:
      case MessageState::kWaiting:
        m.record.version += 1;
        m.record.updated_at = now;
        if (const uint64_t uid = m.uid; !CancelMessage(*queue, index, now)) {
          DependencyFailed(uid, Key(queue->name, id), "canceled", now);
        }
        out.push_back(Status::Ok());
        break;
    }
  }
  return out;
}

Result<uint64_t> Model::CancelByFilter(std::string_view queue_name, const Filter& filter) {
  CallbackFlush flush(this);  // batches made done enqueue their callbacks at the end
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidFilter(filter, 1)) return InvalidArgument("filter");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  TimeMs now = clock_->NowMs();
  // In (priority, enqueue sequence) order: a dependent canceled by an earlier match's cancel is
  // canceled by its dependency, not by this request, and is not counted.
  std::vector<size_t> matches;
  for (size_t i = 0; i < queue->messages.size(); ++i) {
    if (Matches(queue->messages[i].record.metadata, filter)) matches.push_back(i);
  }
  std::sort(matches.begin(), matches.end(),
            [&](size_t a, size_t b) { return Before(queue->messages[a], queue->messages[b]); });
  std::vector<uint64_t> order;
  for (size_t i : matches) order.push_back(queue->messages[i].uid);
  uint64_t count = 0;
  for (const uint64_t uid : order) {
    // By uid: a removal (retention 0) moves the later messages down.
    size_t i = 0;
    while (i < queue->messages.size() && queue->messages[i].uid != uid) ++i;
    if (i == queue->messages.size()) continue;
    Message& m = queue->messages[i];
    if (IsTerminal(m.record.state)) continue;
    m.record.version += 1;
    m.record.updated_at = now;
    const std::string key = Key(queue->name, m.record.id);
    if (!CancelMessage(*queue, i, now)) DependencyFailed(uid, key, "canceled", now);
    ++count;
  }
  return count;
}

namespace {

void ApplyReprioritize(MessageRecord& r, const ReprioritizeRequest& request, TimeMs now) {
  if (request.priority) r.priority = *request.priority;
  if (request.visible_at) {
    if (*request.visible_at > now) {
      r.state = MessageState::kInvisible;
      r.visible_at = *request.visible_at;
    } else {
      r.state = MessageState::kPending;
      r.visible_at = 0;
    }
  }
  r.version += 1;
  r.updated_at = now;
}

}  // namespace

Result<uint64_t> Model::Reprioritize(std::string_view queue_name, std::string_view id,
                                     const ReprioritizeRequest& request) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  if (!request.priority && !request.visible_at) return InvalidArgument("priority or visible_at");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  MessageRecord& r = queue->messages[index].record;
  if (r.state != MessageState::kInvisible && r.state != MessageState::kPending) {
    return FailedPrecondition("state");
  }
  const MessageState from = r.state;
  const TimeMs now = clock_->NowMs();
  ApplyReprioritize(r, request, now);
  RecordHistory(*queue, queue->messages[index], HistoryEvent::kReprioritized, from, now);
  return r.version;
}

Result<uint64_t> Model::ReprioritizeByFilter(std::string_view queue_name, const Filter& filter,
                                             const ReprioritizeRequest& request) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidFilter(filter, 1)) return InvalidArgument("filter");
  if (!request.priority && !request.visible_at) return InvalidArgument("priority or visible_at");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  TimeMs now = clock_->NowMs();
  uint64_t count = 0;
  for (Message& m : queue->messages) {
    MessageState s = m.record.state;
    if (s != MessageState::kInvisible && s != MessageState::kPending) continue;
    if (!Matches(m.record.metadata, filter)) continue;
    ApplyReprioritize(m.record, request, now);
    RecordHistory(*queue, m, HistoryEvent::kReprioritized, s, now);
    ++count;
  }
  return count;
}

std::vector<Status> Model::Redrive(std::string_view queue_name,
                                   const std::vector<std::string>& ids) {
  const size_t n = ids.size();
  if (n == 0 || n > kMaxBatchItems) return Repeat(n, InvalidArgument("batch size"));
  if (!IsValidQueueName(queue_name)) return Repeat(n, InvalidArgument("queue"));
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return Repeat(n, NotFound("queue"));
  TimeMs now = clock_->NowMs();
  std::vector<Status> out;
  for (const std::string& id : ids) {
    if (!ValidId(id)) {
      out.push_back(InvalidArgument("id"));
      continue;
    }
    size_t index = FindIndex(*queue, id);
    if (index == kNpos) {
      out.push_back(NotFound("id"));
      continue;
    }
    Message& m = queue->messages[index];
    if (m.record.state != MessageState::kErrored) {
      out.push_back(FailedPrecondition("state"));
      continue;
    }
    m.record.state = MessageState::kPending;
    m.record.attempts = 0;
    m.record.version += 1;
    m.record.updated_at = now;
    m.gc_at = 0;
    RecordHistory(*queue, m, HistoryEvent::kRedriven, MessageState::kErrored, now);
    out.push_back(Status::Ok());
  }
  return out;
}

Result<uint64_t> Model::RedriveByFilter(std::string_view queue_name, const Filter& filter) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidFilter(filter, 0)) return InvalidArgument("filter");
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  TimeMs now = clock_->NowMs();
  uint64_t count = 0;
  for (Message& m : queue->messages) {
    if (m.record.state != MessageState::kErrored || !Matches(m.record.metadata, filter)) continue;
    m.record.state = MessageState::kPending;
    m.record.attempts = 0;
    m.record.version += 1;
    m.record.updated_at = now;
    m.gc_at = 0;
    RecordHistory(*queue, m, HistoryEvent::kRedriven, MessageState::kErrored, now);
    ++count;
  }
  return count;
}

// ---- Reads ------------------------------------------------------------------------------------

Result<MessageRecord> Model::Get(std::string_view queue_name, std::string_view id) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  return queue->messages[index].record;
}

// GCC 12 at -O2 sees the Status alternative of Result<MessageOutcome>'s variant as read
// uninitialized when the vector grows (a known false positive of -Wmaybe-uninitialized with
// std::variant); the engine's Outcomes compiles clean.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
std::vector<Result<MessageOutcome>> Model::Outcomes(std::string_view queue_name,
                                                    const std::vector<std::string>& ids) const {
  using R = Result<MessageOutcome>;
  if (ids.empty() || ids.size() > kMaxBatchItems)
    return Repeat<R>(ids.size(), InvalidArgument("ids"));
  if (!IsValidQueueName(queue_name)) return Repeat<R>(ids.size(), InvalidArgument("queue"));
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return Repeat<R>(ids.size(), NotFound("queue"));
  std::vector<R> out;
  for (const std::string& id : ids) {
    if (!ValidId(id)) {
      out.push_back(InvalidArgument("id"));
      continue;
    }
    size_t index = FindIndex(*queue, id);
    if (index == kNpos) {
      out.push_back(NotFound("id"));
      continue;
    }
    const MessageRecord& r = queue->messages[index].record;
    out.push_back(MessageOutcome{r.id, r.state, r.result, r.last_error});
  }
  return out;
}
#pragma GCC diagnostic pop

Result<BrowsePage> Model::Browse(std::string_view queue_name, const BrowseRequest& request) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (request.limit < 1 || request.limit > kMaxBrowseLimit) return InvalidArgument("limit");
  if (!ValidFilter(request.filter, 0)) return InvalidArgument("filter");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  int64_t after_priority = 0;
  uint64_t after_seq = 0;
  bool has_cursor = !request.cursor.empty();
  if (has_cursor && !DecodeCursor(request.cursor, &after_priority, &after_seq)) {
    return InvalidArgument("cursor");
  }
  std::vector<const Message*> matching;
  for (const Message& m : queue->messages) {
    if (m.record.state != request.state || !Matches(m.record.metadata, request.filter)) continue;
    if (has_cursor &&
        std::make_pair(m.record.priority, m.seq) <= std::make_pair(after_priority, after_seq)) {
      continue;
    }
    matching.push_back(&m);
  }
  std::sort(matching.begin(), matching.end(),
            [](const Message* a, const Message* b) { return Before(*a, *b); });
  BrowsePage page;
  for (size_t i = 0; i < matching.size() && i < request.limit; ++i) {
    const MessageRecord& r = matching[i]->record;
    page.messages.push_back(MessageSummary{r.id, r.priority, r.state, r.attempts, r.version,
                                           r.visible_at, r.lease_expires_at, r.enqueued_at,
                                           r.updated_at, r.expires_at});
  }
  if (matching.size() > request.limit) {
    const Message* last = matching[request.limit - 1];
    page.next_cursor = EncodeCursor(last->record.priority, last->seq);
  }
  return page;
}

Result<StateCounts> Model::Count(std::string_view queue_name, const Filter& filter) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidFilter(filter, 0)) return InvalidArgument("filter");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  StateCounts counts;
  for (const Message& m : queue->messages) {
    if (!Matches(m.record.metadata, filter)) continue;
    ++counts.by_state[static_cast<size_t>(m.record.state)];
    if (IsBlocked(*queue, m)) CountBlocked(*queue, m, &counts);
  }
  return counts;
}

Result<Explanation> Model::Explain(std::string_view queue_name, std::string_view id) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  const Message& m = queue->messages[index];
  const MessageRecord& r = m.record;
  Explanation e;
  e.id = r.id;
  e.state = r.state;
  e.attempts = r.attempts;
  switch (r.state) {
    case MessageState::kInvisible:
      e.reason = ExplainReason::kInvisible;
      e.until = r.visible_at;
      break;
    case MessageState::kPending: {
      if (queue->settings.dequeue_paused) {
        e.reason = ExplainReason::kQueuePaused;
      } else if (IsBlocked(*queue, m)) {
        ExplainBlocked(*queue, m, &e);
      } else {
        e.reason = ExplainReason::kDequeueable;
        if (queue->queue_refill != 0) {
          e.reason = ExplainReason::kQueueRate;
          e.until = queue->queue_refill;
        }
      }
      break;
    }
    case MessageState::kRunning:
      e.reason = ExplainReason::kRunning;
      e.lease_token = r.lease_token;
      e.until = r.lease_expires_at;
      break;
    case MessageState::kErrored:
      e.reason = ExplainReason::kAttemptsSpent;
      break;
    case MessageState::kCompleted:
    case MessageState::kCanceled:
      e.reason = ExplainReason::kTerminal;
      break;
    case MessageState::kWaiting:
      // How many it listed, how many have not finished, the first 10 of those in listed order.
      e.reason = ExplainReason::kWaitingOnDependencies;
      e.dependencies = static_cast<uint32_t>(m.dependencies.size());
      for (const Dependency& d : m.dependencies) {
        if (d.finished) continue;
        ++e.unfinished;
        if (e.waiting_on.size() < 10) e.waiting_on.push_back(d.key);
      }
      break;
  }
  return e;
}

Result<Explanation> Model::ExplainFilter(std::string_view queue_name, const Filter& filter) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidFilter(filter, 0)) return InvalidArgument("filter");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  Explanation e;
  if (queue->settings.dequeue_paused) {
    e.reason = ExplainReason::kQueuePaused;
    return e;
  }
  auto describe = [&e](const Message& m) {
    e.id = m.record.id;
    e.state = m.record.state;
    e.attempts = m.record.attempts;
  };
  if (size_t index = SelectNext(*queue, filter); index != kNpos) {
    e.reason = ExplainReason::kDequeueable;
    if (queue->queue_refill != 0) {
      e.reason = ExplainReason::kQueueRate;
      e.until = queue->queue_refill;
    }
    describe(queue->messages[index]);
    return e;
  }
  const Message* first_pending = nullptr;
  const Message* first_invisible = nullptr;
  for (const Message& m : queue->messages) {
    if (!Matches(m.record.metadata, filter)) continue;
    if (m.record.state == MessageState::kPending &&
        (first_pending == nullptr || Before(m, *first_pending))) {
      first_pending = &m;
    }
    if (m.record.state == MessageState::kInvisible &&
        (first_invisible == nullptr ||
         std::make_pair(m.record.visible_at, m.seq) <
             std::make_pair(first_invisible->record.visible_at, first_invisible->seq))) {
      first_invisible = &m;
    }
  }
  if (first_pending != nullptr) {
    // Every matching pending message is blocked, or SelectNext would have found it.
    describe(*first_pending);
    ExplainBlocked(*queue, *first_pending, &e);
    return e;
  }
  if (first_invisible != nullptr) {
    e.reason = ExplainReason::kInvisible;
    describe(*first_invisible);
    e.until = first_invisible->record.visible_at;
    return e;
  }
  e.reason = ExplainReason::kNoMatch;
  return e;
}

// ---- Time -------------------------------------------------------------------------------------

uint64_t Model::Advance(TimeMs now) {
  uint64_t transitions = 0;
  std::vector<std::string> order;
  for (const Queue& q : queues_) order.push_back(q.name);
  if (options_.visit_rank) {
    std::stable_sort(order.begin(), order.end(),
                     [this](const std::string& a, const std::string& b) {
                       return options_.visit_rank(a) < options_.visit_rank(b);
                     });
  }
  for (const std::string& name : order) {
    Queue* found = MutableQueue(name);
    if (found == nullptr) continue;
    Queue& queue = *found;
    RefillKeys(queue, now);
    if (queue.queue_refill != 0 && queue.queue_refill <= now) queue.queue_refill = 0;
    while (true) {
      // Before each timer, the expiries due (semantics.md, "Expiry").
      transitions += ExpireDue(queue, now);
      // The due timer with the smallest (due time, enqueue sequence).
      size_t next = kNpos;
      std::pair<TimeMs, uint64_t> next_key{};
      for (size_t i = 0; i < queue.messages.size(); ++i) {
        std::optional<TimeMs> due = TimerDue(queue.messages[i]);
        if (!due || *due > now) continue;
        if (IsTerminal(queue.messages[i].record.state) && IsHeld(queue.messages[i].uid)) {
          // Retention ran out but a waiting dependent listed it: kept, its GC time unchanged,
          // until no waiting dependent holds it (then the first Advance removes it).
          if (!queue.messages[i].gc_held) {
            queue.messages[i].gc_held = true;
            ++held_rechecks_;
          }
          continue;
        }
        std::pair<TimeMs, uint64_t> key{*due, queue.messages[i].seq};
        if (next == kNpos || key < next_key) {
          next = i;
          next_key = key;
        }
      }
      if (next == kNpos) break;
      ++transitions;
      Message& m = queue.messages[next];
      MessageRecord& r = m.record;
      switch (r.state) {
        case MessageState::kInvisible:
          r.state = MessageState::kPending;
          r.visible_at = 0;
          r.version += 1;
          r.updated_at = now;
          RecordHistory(queue, m, HistoryEvent::kBecameVisible, MessageState::kInvisible, now);
          break;
        case MessageState::kRunning: {
          const uint64_t token = r.lease_token;
          const TimeMs stamped_before = r.updated_at;
          r.lease_token = 0;
          r.lease_expires_at = 0;
          r.version += 1;
          r.updated_at = now;
          if (r.attempts < r.max_attempts) {
            r.state = MessageState::kPending;
            RecordHistory(queue, m, HistoryEvent::kLeaseExpired, MessageState::kRunning, now,
                          token);
          } else {
            ErrorOrDeadLetter(queue, next, now, HistoryEvent::kLeaseExpired, token, stamped_before);
          }
          break;
        }
        default:  // terminal: retention ran out, and nothing holds it (above)
          Remove(queue, next);
          break;
      }
    }
  }
  EnqueueCallbacks(now);  // before the fires, as the engine enqueues them in the transition
  const uint64_t fires = FireSchedules(now);
  return transitions + fires + RemoveDueBatches(now);
}

// ---- Dependencies -----------------------------------------------------------------------------

std::vector<std::pair<Model::Queue*, size_t>> Model::WaitingOn(uint64_t uid) {
  std::vector<std::pair<Queue*, size_t>> out;
  for (Queue& q : queues_) {
    for (size_t i = 0; i < q.messages.size(); ++i) {
      const Message& m = q.messages[i];
      if (m.record.state != MessageState::kWaiting) continue;
      for (const Dependency& d : m.dependencies) {
        if (d.uid == uid && !d.finished) {
          out.emplace_back(&q, i);
          break;
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.first->messages[a.second].uid < b.first->messages[b.second].uid;
  });
  return out;
}

bool Model::IsHeld(uint64_t uid) const {
  for (const Queue& q : queues_) {
    for (const Message& m : q.messages) {
      if (m.record.state != MessageState::kWaiting) continue;
      for (const Dependency& d : m.dependencies) {
        if (d.uid == uid) return true;
      }
    }
  }
  return false;
}

void Model::Release(Queue& queue, Message& message, TimeMs now) {
  MessageRecord& r = message.record;
  if (r.visible_at > now) {
    r.state = MessageState::kInvisible;
  } else {
    r.state = MessageState::kPending;
    r.visible_at = 0;
  }
  r.version += 1;
  r.updated_at = now;
  RecordHistory(queue, message, HistoryEvent::kReleased, MessageState::kWaiting, now);
}

// Marks `uid`'s entries of `m` finished; true when none is left unfinished.
static bool CountFinished(Model::Message& m, uint64_t uid) {
  bool all = true;
  for (Model::Dependency& d : m.dependencies) {
    if (d.uid == uid) d.finished = true;
    all = all && d.finished;
  }
  return all;
}

void Model::DependencyCompleted(uint64_t uid, TimeMs now) {
  for (auto [q, i] : WaitingOn(uid)) {
    Message& m = q->messages[i];
    if (CountFinished(m, uid)) Release(*q, m, now);
  }
}

void Model::DependencyFailed(uint64_t uid, const std::string& key, const std::string& verb,
                             TimeMs now) {
  struct Failed {
    uint64_t uid;
    std::string key;
    std::string verb;
  };
  // Breadth first: the dependents a failure cancels or errors fail in turn.
  std::vector<Failed> failed{{uid, key, verb}};
  for (size_t f = 0; f < failed.size(); ++f) {
    const std::string reason = "dependency " + failed[f].key + " " + failed[f].verb;
    for (auto [q, i] : WaitingOn(failed[f].uid)) {
      Message& m = q->messages[i];
      if (m.record.state != MessageState::kWaiting) continue;
      switch (m.policy) {
        case DependencyFailurePolicy::kRelease:
          if (CountFinished(m, failed[f].uid)) Release(*q, m, now);
          break;
        case DependencyFailurePolicy::kCancel:
        case DependencyFailurePolicy::kError: {
          const bool error = m.policy == DependencyFailurePolicy::kError;
          m.record.last_error = reason;
          m.record.version += 1;
          m.record.updated_at = now;
          MakeTerminal(*q, i, error ? MessageState::kErrored : MessageState::kCanceled, now);
          RecordHistory(*q, m, HistoryEvent::kDependencyFailed, MessageState::kWaiting, now, 0,
                        reason);
          failed.push_back({m.uid, Key(q->name, m.record.id), error ? "errored" : "canceled"});
          break;
        }
      }
    }
  }
}

void Model::DependenciesRemoved(const std::string& queue_name, std::vector<Message> removed,
                                TimeMs now) {
  // They are gone already (a removed dependent waits no more); each that had not finished is a
  // failed dependency, in the order of their ids.
  std::sort(removed.begin(), removed.end(),
            [](const Message& a, const Message& b) { return a.record.id < b.record.id; });
  for (const Message& m : removed) {
    if (IsTerminal(m.record.state)) continue;
    DependencyFailed(m.uid, Key(queue_name, m.record.id), "removed", now);
  }
  // A batch member removed while active counts as canceled.
  for (Message& m : removed) {
    if (!IsTerminal(m.record.state) && !m.batch.empty()) {
      FinishMember(m, MessageState::kCanceled, now);
    }
  }
}

Result<std::vector<std::pair<std::string, Result<MessageOutcome>>>> Model::DependencyOutcomes(
    std::string_view queue_name, std::string_view id) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  std::vector<std::pair<std::string, Result<MessageOutcome>>> out;
  for (const Dependency& d : queue->messages[index].dependencies) {
    Result<MessageOutcome> outcome = NotFound("id");
    for (const Queue& q : queues_) {
      for (const Message& m : q.messages) {
        if (m.uid == d.uid) {
          outcome =
              MessageOutcome{m.record.id, m.record.state, m.record.result, m.record.last_error};
        }
      }
    }
    out.emplace_back(d.key, std::move(outcome));
  }
  return out;
}

// ---- Schedules --------------------------------------------------------------------------------

namespace {

std::string FireId(std::string_view name, TimeMs t) {
  return std::string(name) + "@" + std::to_string(t);
}

bool ValidScheduleName(std::string_view name) {
  return name.size() <= kMaxScheduleName && IsValidQueueName(name);
}

}  // namespace

const Model::Schedule* Model::FindSchedule(std::string_view queue, std::string_view name) const {
  for (const Schedule& s : schedules_) {
    if (s.queue == queue && s.name == name) return &s;
  }
  return nullptr;
}

Model::Schedule* Model::MutableSchedule(std::string_view queue, std::string_view name) {
  return const_cast<Schedule*>(FindSchedule(queue, name));
}

TimeMs Model::NextFire(const Schedule& schedule, TimeMs after) {
  if (schedule.cron) return schedule.cron->Next(after).value_or(0);
  // anchor + k * every_ms, the first strictly after `after` (k >= 1).
  const int64_t every = schedule.spec.every_ms;
  const TimeMs anchor = schedule.progress.anchor_at;
  if (after < anchor) return anchor + every;
  return anchor + ((after - anchor) / every + 1) * every;
}

ScheduleInfo Model::InfoOf(const Schedule& schedule) const {
  ScheduleInfo info;
  info.queue = schedule.queue;
  info.name = schedule.name;
  info.spec = schedule.spec;
  info.progress = schedule.progress;
  info.next_fire_at = schedule.progress.paused ? 0 : NextFire(schedule, schedule.progress.after);
  info.last_error = schedule.last_error;
  return info;
}

Result<ScheduleUpsertResult> Model::UpsertSchedule(std::string_view queue, std::string_view name,
                                                   ScheduleSpec spec, const Metadata& metadata) {
  if (!ValidMetadata(metadata)) return InvalidArgument("metadata");
  if (!IsValidQueueName(queue)) return InvalidArgument("queue");
  if (!ValidScheduleName(name)) return InvalidArgument("name");
  spec.packed_metadata.clear();
  std::optional<CronSchedule> cron;
  if (spec.cron.empty() == (spec.every_ms == 0)) return InvalidArgument("cron or every_ms");
  if (spec.cron.empty()) {
    if (!spec.tz.empty()) return InvalidArgument("tz");
    if (spec.every_ms < kMinEveryMs || spec.every_ms > kMaxDelayMs) {
      return InvalidArgument("every_ms");
    }
  } else {
    Result<CronSchedule> parsed = CronSchedule::Parse(spec.cron, spec.tz);
    if (!parsed.ok()) return parsed.status();
    cron = std::move(*parsed);
  }
  if (spec.priority_offset_ms < -kMaxDelayMs || spec.priority_offset_ms > kMaxDelayMs) {
    return InvalidArgument("priority_offset_ms");
  }
  if (spec.payload.size() > options_.max_payload_bytes) return InvalidArgument("payload");
  if (spec.max_attempts != 0 && !ValidMaxAttempts(spec.max_attempts)) {
    return InvalidArgument("max_attempts");
  }
  if (!options_.auto_create_queues && FindQueue(queue) == nullptr) return NotFound("queue");
  TimeMs now = clock_->NowMs();
  Schedule* existing = MutableSchedule(queue, name);
  if (existing == nullptr && schedules_.size() >= kScheduleLimit) {
    return ResourceExhausted("schedules");
  }
  bool created = existing == nullptr;
  if (created) {
    schedules_.push_back(Schedule{std::string(queue), std::string(name), {}, {}, {}, {}, {}});
    existing = &schedules_.back();
    existing->progress.created_at = now;
  }
  Schedule& s = *existing;
  bool same_timing = !created && s.spec.cron == spec.cron && s.spec.tz == spec.tz &&
                     s.spec.every_ms == spec.every_ms;
  if (!same_timing) {
    s.progress.anchor_at = now;
    s.progress.after = now;
  }
  s.progress.updated_at = now;
  s.spec = std::move(spec);
  s.metadata = metadata;
  s.cron = std::move(cron);
  return ScheduleUpsertResult{InfoOf(s), created};
}

Result<ScheduleInfo> Model::GetSchedule(std::string_view queue, std::string_view name) const {
  if (!IsValidQueueName(queue)) return InvalidArgument("queue");
  if (!ValidScheduleName(name)) return InvalidArgument("name");
  const Schedule* s = FindSchedule(queue, name);
  if (s == nullptr) return NotFound("schedule");
  return InfoOf(*s);
}

std::vector<ScheduleInfo> Model::ListSchedules(std::string_view queue) const {
  std::vector<const Schedule*> found;
  for (const Schedule& s : schedules_) {
    if (queue.empty() || s.queue == queue) found.push_back(&s);
  }
  std::sort(found.begin(), found.end(), [](const Schedule* a, const Schedule* b) {
    return std::tie(a->queue, a->name) < std::tie(b->queue, b->name);
  });
  std::vector<ScheduleInfo> out;
  for (const Schedule* s : found) out.push_back(InfoOf(*s));
  return out;
}

Status Model::DeleteSchedule(std::string_view queue, std::string_view name) {
  if (!IsValidQueueName(queue)) return InvalidArgument("queue");
  if (!ValidScheduleName(name)) return InvalidArgument("name");
  for (size_t i = 0; i < schedules_.size(); ++i) {
    if (schedules_[i].queue == queue && schedules_[i].name == name) {
      schedules_.erase(schedules_.begin() + static_cast<ptrdiff_t>(i));
      return Status::Ok();
    }
  }
  return NotFound("schedule");
}

Result<ScheduleInfo> Model::PauseSchedule(std::string_view queue, std::string_view name) {
  if (!IsValidQueueName(queue)) return InvalidArgument("queue");
  if (!ValidScheduleName(name)) return InvalidArgument("name");
  Schedule* s = MutableSchedule(queue, name);
  if (s == nullptr) return NotFound("schedule");
  if (!s->progress.paused) {
    s->progress.paused = true;
    s->progress.updated_at = clock_->NowMs();
  }
  return InfoOf(*s);
}

Result<ScheduleInfo> Model::ResumeSchedule(std::string_view queue, std::string_view name) {
  if (!IsValidQueueName(queue)) return InvalidArgument("queue");
  if (!ValidScheduleName(name)) return InvalidArgument("name");
  Schedule* s = MutableSchedule(queue, name);
  if (s == nullptr) return NotFound("schedule");
  if (s->progress.paused) {
    TimeMs now = clock_->NowMs();
    s->progress.paused = false;
    s->progress.after = std::max(s->progress.after, now);  // fires while paused are not made
    s->progress.updated_at = now;
  }
  return InfoOf(*s);
}

Result<ScheduleTriggerResult> Model::TriggerSchedule(std::string_view queue,
                                                     std::string_view name) {
  if (!IsValidQueueName(queue)) return InvalidArgument("queue");
  if (!ValidScheduleName(name)) return InvalidArgument("name");
  Schedule* s = MutableSchedule(queue, name);
  if (s == nullptr) return NotFound("schedule");
  TimeMs now = clock_->NowMs();
  uint64_t enqueued = 0;
  bool duplicate = false;
  MakeFires(*s, {now}, s->progress.after, 0, /*check_overlap=*/false, &enqueued, &duplicate);
  if (enqueued == 0) return FailedPrecondition("schedule: fire refused");
  return ScheduleTriggerResult{FireId(name, now), now, duplicate};
}

void Model::MakeFires(Schedule& schedule, const std::vector<TimeMs>& fires, TimeMs after,
                      uint64_t dropped, bool check_overlap, uint64_t* enqueued, bool* duplicate) {
  ScheduleProgress& p = schedule.progress;
  for (TimeMs t : fires) {
    p.last_fire_at = t;
    if (check_overlap && schedule.spec.overlap == OverlapPolicy::kSkipIfActive &&
        p.last_enqueued_at != 0) {
      // The previous fire's message, if it still exists and is not terminal.
      const Queue* q = FindQueue(schedule.queue);
      size_t index =
          q == nullptr ? kNpos : FindIndex(*q, FireId(schedule.name, p.last_enqueued_at));
      if (index != kNpos && !IsTerminal(q->messages[index].record.state)) {
        ++p.overlap_skips;
        continue;
      }
    }
    EnqueueItem item;
    item.id = FireId(schedule.name, t);
    item.priority = t + schedule.spec.priority_offset_ms;
    item.payload = schedule.spec.payload;
    item.metadata = schedule.metadata;
    if (schedule.spec.max_attempts != 0) item.max_attempts = schedule.spec.max_attempts;
    std::vector<EnqueueItem> items;
    items.push_back(std::move(item));
    Result<EnqueueResult> r = Enqueue(schedule.queue, std::move(items)).front();
    if (r.ok() || r.status().code() == Code::kAlreadyExists) {
      // A message with this id exists: the fire was made before (a crash, a replay).
      ++p.fires;
      ++*enqueued;
      p.last_enqueued_at = t;
      *duplicate = !r.ok() || r->duplicate;
    } else {
      ++p.failed;
      schedule.last_error = "fire at " + std::to_string(t);
    }
  }
  p.after = after;
  p.missed += dropped;
}

uint64_t Model::FireSchedules(TimeMs now) {
  // Due schedules in (next fire, queue, name) order.
  std::vector<std::tuple<TimeMs, std::string, std::string>> due;
  for (const Schedule& s : schedules_) {
    if (s.progress.paused) continue;
    TimeMs next = NextFire(s, s.progress.after);
    if (next != 0 && next <= now) due.emplace_back(next, s.queue, s.name);
  }
  std::sort(due.begin(), due.end());
  uint64_t enqueued = 0;
  for (const auto& [next, queue, name] : due) {
    Schedule& s = *MutableSchedule(queue, name);
    // Every fire in (after, now], none older than the horizon: on time ones (late by at most
    // the grace) always, missed ones by the misfire policy; the latest 100 at most.
    std::vector<TimeMs> on_time, missed;
    for (TimeMs t = NextFire(s, std::max(s.progress.after, now - kCatchUpHorizonMs));
         t != 0 && t <= now; t = NextFire(s, t)) {
      (now - t <= kMisfireGraceMs ? on_time : missed).push_back(t);
    }
    std::vector<TimeMs> made;
    if (s.spec.misfire == MisfirePolicy::kAll) made = missed;
    if (s.spec.misfire == MisfirePolicy::kOne && !missed.empty()) made.push_back(missed.back());
    made.insert(made.end(), on_time.begin(), on_time.end());
    if (made.size() > kCatchUpFires) {
      made.erase(made.begin(), made.end() - static_cast<ptrdiff_t>(kCatchUpFires));
    }
    uint64_t dropped = on_time.size() + missed.size() - made.size();
    bool duplicate = false;
    MakeFires(s, made, now, dropped, /*check_overlap=*/true, &enqueued, &duplicate);
  }
  return enqueued;
}

// ---- Batches (docs/semantics.md, "Batches") ---------------------------------------------------

Result<BatchInfo> Model::CreateBatch(const CreateBatchRequest& request) {
  if (request.id.empty() || request.id.size() > kMaxBatchIdBytes || !IsValidUtf8(request.id)) {
    return InvalidArgument("id");
  }
  if (request.retention_ms && !ValidDelayMs(*request.retention_ms)) {
    return InvalidArgument("retention_ms");
  }
  BatchInfo b;
  b.id = request.id;
  b.retention_ms = request.retention_ms.value_or(kDefaultBatchRetentionMs);
  if (request.callback) {
    const BatchCallback& c = *request.callback;
    if (!IsValidQueueName(c.queue)) return InvalidArgument("callback.queue");
    if (!c.id.empty() && !ValidId(c.id)) return InvalidArgument("callback.id");
    if (c.metadata.size() > kMaxMetadataPairs - kBatchCallbackKeys || !ValidMetadata(c.metadata)) {
      return InvalidArgument("callback.metadata");
    }
    for (const MetadataPair& p : c.metadata) {
      if (p.key.starts_with("x-batch-")) return InvalidArgument("callback.metadata x-batch-");
    }
    if (c.max_attempts && !ValidMaxAttempts(*c.max_attempts)) {
      return InvalidArgument("callback.max_attempts");
    }
    b.callback = c;
    if (b.callback->id.empty()) b.callback->id = "batch:" + request.id;
  }
  if (const BatchInfo* existing = MutableBatch(b.id)) {
    if (existing->callback == b.callback && existing->retention_ms == b.retention_ms) {
      return *existing;
    }
    return AlreadyExists("batch id");
  }
  b.created_at = clock_->NowMs();
  batches_.push_back(b);
  return b;
}

Result<BatchInfo> Model::SealBatch(std::string_view id) {
  CallbackFlush flush(this);
  BatchInfo* b = MutableBatch(id);
  if (b == nullptr) return NotFound("batch");
  if (b->sealed) return *b;
  b->sealed = true;
  if (b->counts.active() == 0) {
    b->done = true;
    b->done_at = clock_->NowMs();
    if (b->callback) done_batches_.push_back(b->id);
  }
  return *b;
}

Result<BatchInfo> Model::GetBatch(std::string_view id) const {
  for (const BatchInfo& b : batches_) {
    if (b.id == id) return b;
  }
  return NotFound("batch");
}

BatchInfo* Model::MutableBatch(std::string_view id) {
  for (BatchInfo& b : batches_) {
    if (b.id == id) return &b;
  }
  return nullptr;
}

void Model::FinishMember(Message& message, MessageState state, TimeMs now) {
  BatchInfo* b = MutableBatch(message.batch);
  message.batch.clear();
  if (b == nullptr) return;  // cannot be: a batch with an active member is never removed
  switch (state) {
    case MessageState::kCompleted:
      b->counts.completed += 1;
      break;
    case MessageState::kCanceled:
      b->counts.canceled += 1;
      break;
    default:
      b->counts.errored += 1;
      break;
  }
  if (b->sealed && !b->done && b->counts.active() == 0) {
    b->done = true;
    b->done_at = now;
    if (b->callback) done_batches_.push_back(b->id);
  }
}

void Model::EnqueueCallbacks(TimeMs now) {
  for (const std::string& id : std::exchange(done_batches_, {})) {
    const BatchInfo* b = MutableBatch(id);
    if (b == nullptr || !b->callback) continue;
    const BatchCallback& c = *b->callback;
    EnqueueItem item;
    item.id = c.id;
    item.priority = c.priority;
    item.payload = c.payload;
    item.metadata = c.metadata;
    item.metadata.push_back({std::string(kBatchIdKey), b->id});
    item.metadata.push_back({std::string(kBatchTotalKey), std::to_string(b->counts.members)});
    item.metadata.push_back({std::string(kBatchCompletedKey), std::to_string(b->counts.completed)});
    item.metadata.push_back({std::string(kBatchCanceledKey), std::to_string(b->counts.canceled)});
    item.metadata.push_back({std::string(kBatchErroredKey), std::to_string(b->counts.errored)});
    item.max_attempts = c.max_attempts;
    size_t queue_index = kNpos;
    for (size_t i = 0; i < queues_.size(); ++i) {
      if (queues_[i].name == c.queue) queue_index = i;
    }
    if (queue_index == kNpos) {  // created with the defaults, whatever auto_create_queues says
      queues_.push_back(Queue{c.queue, QueueSettings{}, 1, {}, {}, {}, {}, 0, {}, 0});
      queue_index = queues_.size() - 1;
    }
    Result<EnqueueResult> r = EnqueueOne(queue_index, item, "", now, /*forced=*/true);
    if (r.ok() && !r->duplicate) callbacks_.push_back(Key(c.queue, c.id));
  }
}

uint64_t Model::RemoveDueBatches(TimeMs now) {
  const size_t before = batches_.size();
  std::erase_if(batches_, [now](const BatchInfo& b) {
    return b.done && b.done_at + b.retention_ms <= now;  // retention_ms <= 100 years: no overflow
  });
  return before - batches_.size();
}

// ---- Flows (docs/semantics.md, "Flows") -------------------------------------------------------

namespace {

struct FlatNode {
  const FlowNode* node = nullptr;
  size_t parent = kNpos;
  size_t root = 0;  // pre-order index of its tree's root
  std::vector<size_t> children;
  std::string key;                   // "queue/id" when the id is given
  std::vector<std::string> entries;  // its own depends_on, resolved
};

// Appends `node` and its subtree in pre-order; INVALID_ARGUMENT past the count or depth limit.
Status FlattenFlow(const FlowNode& node, size_t parent, size_t depth, std::vector<FlatNode>& out) {
  if (out.size() == kMaxFlowNodes) return InvalidArgument("nodes: at most 1000");
  if (depth > kMaxFlowDepth) return InvalidArgument("nodes: at most 32 levels");
  const size_t index = out.size();
  FlatNode flat;
  flat.node = &node;
  flat.parent = parent;
  flat.root = parent == kNpos ? index : out[parent].root;
  out.push_back(std::move(flat));
  if (parent != kNpos) out[parent].children.push_back(index);
  for (const FlowNode& child : node.children) {
    if (Status s = FlattenFlow(child, index, depth + 1, out); !s.ok()) return s;
  }
  return Status::Ok();
}

void PostOrderOf(const std::vector<FlatNode>& nodes, size_t index, std::vector<size_t>& out) {
  for (size_t child : nodes[index].children) PostOrderOf(nodes, child, out);
  out.push_back(index);
}

}  // namespace

Result<std::vector<FlowNodeResult>> Model::EnqueueFlow(
    const std::vector<FlowNode>& roots, const std::vector<std::string>& generated_ids) {
  // 1. Limits, in pre-order.
  if (roots.empty()) return InvalidArgument("nodes: none");
  std::vector<FlatNode> nodes;
  for (const FlowNode& root : roots) {
    if (Status s = FlattenFlow(root, kNpos, 1, nodes); !s.ok()) return s;
  }
  // 2. Each node's arguments, as an enqueue checks them; an id named twice.
  for (size_t i = 0; i < nodes.size(); ++i) {
    FlatNode& n = nodes[i];
    const EnqueueItem& item = n.node->item;
    if (!IsValidQueueName(n.node->queue)) return InvalidArgument("queue");
    if (Status v = ValidateItem(item); !v.ok()) return v;
    if (item.debounce_ms) return InvalidArgument("debounce_ms");
    if (item.depends_on.size() + n.children.size() > kMaxDependencyEntries) {
      return InvalidArgument("depends_on");
    }
    for (const std::string& entry : item.depends_on) {
      n.entries.push_back(ResolveEntry(n.node->queue, entry));
      auto [dq, did] = SplitEntryKey(n.entries.back());
      if (!IsValidQueueName(dq) || !ValidId(did)) return InvalidArgument("depends_on");
    }
    if (!item.id.empty()) {
      n.key = Key(n.node->queue, item.id);
      for (size_t j = 0; j < i; ++j) {
        if (nodes[j].key == n.key) return InvalidArgument("id named twice");
      }
    }
  }
  // 3. Resends: a root whose id exists in its queue (the same message, else ALREADY_EXISTS).
  std::vector<bool> resent(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const FlatNode& n = nodes[i];
    if (n.parent != kNpos || n.key.empty()) continue;
    const Queue* q = FindQueue(n.node->queue);
    const size_t index = q == nullptr ? kNpos : FindIndex(*q, n.node->item.id);
    if (index == kNpos) continue;
    const EnqueueItem& item = n.node->item;
    if (MissingGateKey(*q, item.metadata)) return InvalidArgument("gate key missing");
    const MessageRecord& existing = q->messages[index].record;
    bool same = existing.priority == item.priority && existing.payload == item.payload &&
                SortedPairs(existing.metadata) == SortedPairs(item.metadata) &&
                (!item.max_attempts || *item.max_attempts == existing.max_attempts);
    if (!same) return AlreadyExists("id: the root of a resend with other content");
    resent[i] = true;
  }
  for (size_t i = 0; i < nodes.size(); ++i) resent[i] = resent[nodes[i].root];
  // 4. Against the state, node by node in the order they would be enqueued (post-order), then
  //    the memory budget for all new messages together.
  std::vector<size_t> post;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].parent == kNpos) PostOrderOf(nodes, i, post);
  }
  std::vector<std::pair<std::string, uint64_t>> ready;  // queue -> new non-waiting messages
  uint64_t new_bytes = 0;
  for (size_t k = 0; k < post.size(); ++k) {
    const size_t i = post[k];
    if (resent[i]) continue;
    const FlatNode& n = nodes[i];
    const EnqueueItem& item = n.node->item;
    const Queue* q = FindQueue(n.node->queue);
    if (q == nullptr && !options_.auto_create_queues) return NotFound("queue");
    if (q != nullptr) {
      if (!item.id.empty() && FindIndex(*q, item.id) != kNpos) return AlreadyExists("id");
      if (q->settings.enqueue_paused) return FailedPrecondition("enqueue_paused");
      if (MissingGateKey(*q, item.metadata)) return InvalidArgument("gate key missing");
      const bool waits = !n.children.empty() || !item.depends_on.empty();
      if (!waits && q->settings.max_depth > 0) {
        // The queue's non-terminal messages (waiting ones included: "Enqueue"), plus the
        // flow's own new non-waiting ones, this one included.
        uint64_t live = 0;
        for (const Message& m : q->messages) live += IsTerminal(m.record.state) ? 0 : 1;
        auto it = std::find_if(ready.begin(), ready.end(),
                               [&](const auto& r) { return r.first == q->name; });
        if (it == ready.end()) it = ready.insert(ready.end(), {q->name, 0});
        it->second += 1;
        if (live + it->second > q->settings.max_depth) return ResourceExhausted("max_depth");
      }
    }
    for (const std::string& key : n.entries) {
      // A node of this flow enqueued before this one, or a message that exists now.
      bool earlier = false;
      for (size_t j = 0; j < k; ++j) earlier |= !resent[post[j]] && nodes[post[j]].key == key;
      if (earlier) continue;
      auto [dq, did] = SplitEntryKey(key);
      const Queue* dqueue = FindQueue(dq);
      if (dqueue == nullptr || FindIndex(*dqueue, did) == kNpos) {
        return NotFound("depends_on: no such message");
      }
    }
    if (!item.batch.empty()) {
      const BatchInfo* batch = MutableBatch(item.batch);
      if (batch == nullptr) return NotFound("batch: no such batch");
      if (batch->sealed) return FailedPrecondition("batch: sealed");
    }
    const std::string& id = item.id.empty() ? std::string(26, '~') : item.id;
    new_bytes += kModelMessageOverheadBytes + id.size() + item.payload.size() +
                 PackedMetadataBytes(item.metadata);
  }
  if (options_.memory_budget_bytes > 0 &&
      memory_bytes() + new_bytes > options_.memory_budget_bytes) {
    return ResourceExhausted("memory budget");
  }
  // 5. Enqueue, children first: each node waits on its children, then on its own entries.
  const TimeMs now = clock_->NowMs();
  std::vector<FlowNodeResult> results(nodes.size());
  for (const size_t i : post) {
    const FlatNode& n = nodes[i];
    FlowNodeResult& out = results[i];
    out.queue = n.node->queue;
    if (resent[i]) continue;
    size_t queue_index = kNpos;
    for (size_t j = 0; j < queues_.size(); ++j) {
      if (queues_[j].name == n.node->queue) queue_index = j;
    }
    if (queue_index == kNpos) {
      queues_.push_back(Queue{n.node->queue, QueueSettings{}, 1, {}, {}, {}, {}, 0, {}, 0});
      queue_index = queues_.size() - 1;
    }
    EnqueueItem item = n.node->item;
    item.depends_on.clear();
    for (size_t c : n.children) item.depends_on.push_back(Key(results[c].queue, results[c].id));
    for (const std::string& key : n.entries) item.depends_on.push_back(key);
    std::vector<std::string> once;
    for (std::string& key : item.depends_on) {
      if (std::find(once.begin(), once.end(), key) == once.end()) once.push_back(std::move(key));
    }
    item.depends_on = std::move(once);
    std::string generated;
    if (item.id.empty()) {
      if (i < generated_ids.size() && !generated_ids[i].empty()) {
        generated = generated_ids[i];
      } else {
        std::string number = std::to_string(++placeholder_counter_);
        generated = "~" + std::string(25 - number.size(), '0') + number;
      }
    }
    // Every check passed above: the enqueue cannot be refused (forced: the pause, depth and
    // budget were checked for the flow as a whole).
    Result<EnqueueResult> r = EnqueueOne(queue_index, item, generated, now, /*forced=*/true);
    if (!r.ok()) return Status(Code::kInternal, "model: a checked flow node was refused");
    out.id = r->id;
    out.version = r->version;
  }
  // The nodes of resent trees: the id as sent, the current version (0: gone).
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!resent[i]) continue;
    FlowNodeResult& out = results[i];
    out.id = nodes[i].node->item.id;
    out.duplicate = true;
    const Queue* q = FindQueue(out.queue);
    const size_t index = q == nullptr || out.id.empty() ? kNpos : FindIndex(*q, out.id);
    if (index != kNpos) out.version = q->messages[index].record.version;
  }
  return results;
}

// ---- History ----------------------------------------------------------------------------------

bool Model::CancelMessage(Queue& queue, size_t index, TimeMs now) {
  const MessageRecord& r = queue.messages[index].record;
  const MessageState from = r.state;
  // A canceled lease: its entry names that lease.
  const uint64_t token = from == MessageState::kRunning ? r.lease_token : 0;
  if (MakeTerminal(queue, index, MessageState::kCanceled, now)) return true;  // gone
  RecordHistory(queue, queue.messages[index], HistoryEvent::kCanceled, from, now, token);
  return false;
}

uint64_t Model::HistoryBytes(const MessageHistory& history) {
  if (history.entries.empty()) return 0;
  uint64_t bytes = 14;
  for (const HistoryEntry& e : history.entries) bytes += 22 + e.text.size();
  return bytes;
}

void Model::RecordHistory(const Queue& queue, Message& message, HistoryEvent event,
                          MessageState from, TimeMs now, uint64_t lease_token,
                          std::string_view text) {
  const uint32_t max = queue.settings.history_max;
  if (max == 0) return;  // off: nothing recorded, what is held stays
  MessageHistory& h = message.history;
  // Consecutive extends of one lease are one entry, its time the latest.
  if (event == HistoryEvent::kExtended && !h.entries.empty() &&
      h.entries.back().event == HistoryEvent::kExtended &&
      h.entries.back().lease_token == lease_token) {
    h.entries.back().time = now;
    return;
  }
  // At most `max`: the first and the latest max - 1 (a lowered max trims at the next entry).
  while (h.entries.size() >= max) {
    h.entries.erase(h.entries.begin() + 1);
    ++h.dropped;
  }
  HistoryEntry entry;
  entry.time = now;
  entry.event = event;
  entry.from = from;
  entry.to = message.record.state;
  entry.attempt = message.record.attempts;
  entry.lease_token = lease_token;
  entry.text = std::string(text);
  h.entries.push_back(std::move(entry));
}

Result<MessageHistory> Model::History(std::string_view queue_name, std::string_view id) const {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  const Queue* queue = FindQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  MessageHistory out = queue->messages[index].history;
  // worker_id: the one the dequeue of the entry's lease gave, when that lease's entry is kept.
  for (HistoryEntry& e : out.entries) {
    if (e.lease_token == 0) continue;
    for (const HistoryEntry& lease : out.entries) {
      if (lease.event == HistoryEvent::kLeased && lease.lease_token == e.lease_token) {
        e.worker_id = lease.text;
      }
    }
  }
  return out;
}

Status Model::Note(std::string_view queue_name, std::string_view id, uint64_t lease_token,
                   std::string_view text) {
  if (!IsValidQueueName(queue_name)) return InvalidArgument("queue");
  if (!ValidId(id)) return InvalidArgument("id");
  if (text.empty() || text.size() > kMaxNoteBytes || !IsValidUtf8(text)) {
    return InvalidArgument("text");
  }
  Queue* queue = MutableQueue(queue_name);
  if (queue == nullptr) return NotFound("queue");
  // semantics.md names both refusals; the engine checks history_max before the message.
  if (queue->settings.history_max == 0) return FailedPrecondition("history_max 0");
  size_t index = FindIndex(*queue, id);
  if (index == kNpos) return NotFound("id");
  Message& m = queue->messages[index];
  TimeMs now = clock_->NowMs();
  if (!LeaseValid(m.record, lease_token, now)) return FailedPrecondition("lease");
  RecordHistory(*queue, m, HistoryEvent::kNoted, MessageState::kRunning, now, lease_token, text);
  return Status::Ok();
}

}  // namespace sundial::model
