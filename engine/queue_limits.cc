// Queue's flow control beside the key gate (docs/semantics.md, "Flow control"; docs/engine.md,
// "Key gate"): the queue-wide token bucket, fair share's choice, the explain of a held message,
// per-key limits (set_key_limits, get_key_limits, list_keys) and the replay of their effects,
// and the kQueueReady notification. The key gate (engine/key_gate.h) keeps the per-value state;
// these are the members of Queue (queue.h) that only flow control uses, apart from queue.cc as
// queue_expiry.cc is. The hooks stay in queue.cc: Dequeue checks the buckets and serves turns,
// Advance refills, Export and HashInto restate and hash the state.
#include <xxhash.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/key_gate.h"
#include "engine/metadata.h"
#include "engine/queue.h"
#include "engine/validation.h"

namespace sundial {

TimeMs Queue::NextRefill() const {
  TimeMs next = queue_refill_ms_ != 0 ? queue_refill_ms_ : INT64_MAX;
  if (gate_ != nullptr) next = std::min(next, gate_->NextRefill());
  return next;
}

int64_t Queue::QueueIntervalUs() const { return IntervalUsOf(settings_.rate_milli); }

int64_t Queue::QueueTokenFromUs() const {
  return queue_tat_us_ - QueueIntervalUs() * (std::max<uint32_t>(settings_.burst, 1) - 1);
}

void Queue::QueueGranted(TimeMs at) {
  if (settings_.rate_milli == 0) return;
  queue_tat_us_ = std::max(queue_tat_us_, at * 1000) + QueueIntervalUs();
}

MessageRef Queue::SelectFair(const Filter& filter, TimeMs now, bool* in_turn) {
  // A filter dequeue is earliest deadline first among its matches, outside the rotation, as is
  // an overdue message: neither spends a turn, even the front value's.
  *in_turn = false;
  if (!filter.empty() || ready_.empty()) return SelectPending(filter);
  const MessageRef first = ready_.top_ref();
  const int64_t overdue = settings_.overdue_first_ms;
  if (overdue != 0 && At(first)->priority < SaturatingAdd(now, -overdue)) return first;
  *in_turn = true;
  return gate_->FairHead();
}

void Queue::ExplainHeld(const Message* m, Explanation* x) const {
  const std::string_view value = gate_->ValueOf(m);
  x->exclusivity_value = std::string(value);
  if (gate_->ReasonOf(m) == KeyGate::BlockReason::kRate) {  // below its concurrency, no token
    x->reason = ExplainReason::kKeyRate;
    x->lease_token = 0;
    x->until = gate_->RefillOf(m);
    return;
  }
  // Held: the key's running messages, by a scan of the timers (explain only). The one whose
  // lease ends first, by (expiry, seq), is named (exclusive: the only one).
  Timing first{INT64_MAX, 0};
  uint64_t first_seq = 0;
  for (size_t i = 0; i < timers_.size(); ++i) {
    const TimerEntry& e = timers_.at(i);
    const Message* r = At(e.ref);
    if (r->state() != MessageState::kRunning || gate_->ValueOf(r) != value) continue;
    if (e.due_at < first.due_at || (e.due_at == first.due_at && r->seq < first_seq)) {
      first = {e.due_at, e.token};
      first_seq = r->seq;
    }
  }
  x->reason = exclusive() ? ExplainReason::kExclusivityHeld : ExplainReason::kKeyConcurrency;
  x->key_running = gate_->RunningOf(m);
  x->key_concurrency = gate_->LimitOf(m);
  x->lease_token = first.token;
  x->until = first.due_at == INT64_MAX ? 0 : first.due_at;
}

Status Queue::ApplyKeyState(const Effect& e) {
  if (e.tat_us < 0 || e.id.size() > kMaxMetadataValueBytes ||
      (gate_ == nullptr && !e.gate_record)) {
    return Status(Code::kInternal, "effect: key state of a queue without a flow key");
  }
  if (e.gate_record) {
    queue_tat_us_ = e.tat_us;
    if (gate_ != nullptr) gate_->RestateCollected(e.time);
  } else {
    gate_->Restate(e.id, e.tat_us);
  }
  return Status::Ok();
}

Status Queue::ApplyKeyLimits(const Effect& e) {
  if (gate_ == nullptr) return Status(Code::kInternal, "effect: key limits of an ungated queue");
  if (Status s = CheckKeyLimits(e.id, e.key_limits); !s.ok()) {
    return Status(Code::kInternal, "effect: key limits: " + std::string(s.detail()));
  }
  gate_->SetOverride(e.id, e.key_limits);
  return Status::Ok();
}

Status Queue::CheckKeyLimits(std::string_view value, const KeyLimits& l) const {
  if (Status s = ValidateKeyValue(value); !s.ok()) return s;
  if ((l.set & ~KeyLimits::kAll) != 0) {
    return InvalidArgument("key limits: unknown field");
  }
  if (l.has(KeyLimits::kConcurrency)) {
    if (exclusive()) {
      return InvalidArgument("concurrency: an exclusive queue runs one message per value");
    }
    if (l.concurrency > kMaxKeyConcurrency) {
      return InvalidArgument("concurrency: must be 0 (no limit) to 1000000");
    }
  }
  if (l.has(KeyLimits::kRate) && l.rate_milli > kMaxRateMilli) {
    return InvalidArgument("rate_per_s: must be 0.001-1000000 with at most 3 decimals");
  }
  if (l.has(KeyLimits::kBurst) && (l.burst < 1 || l.burst > kMaxBurst)) {
    return InvalidArgument("burst: must be 1-1000000");
  }
  if (l.has(KeyLimits::kWeight) && (l.weight < 1 || l.weight > kMaxKeyWeight)) {
    return InvalidArgument("weight: must be 1-1000");
  }
  if (!l.empty() && gate_->OverrideOf(value) == nullptr && gate_->overrides() >= kMaxKeyOverrides) {
    return Status(Code::kResourceExhausted, "key limits: at most 10000 values per queue");
  }
  return Status::Ok();
}

void Queue::SetKeyLimits(std::string_view value, const KeyLimits& limits) {
  gate_->SetOverride(value, limits);
}

Effect Queue::KeyLimitsEffect(std::string_view value, const KeyLimits& limits, TimeMs time) const {
  Effect e;
  e.type = EffectType::kKeyLimitsSet;
  e.time = time;
  e.queue = name_;
  e.id = value;
  e.key_limits = limits;
  return e;
}

KeyInfo Queue::DescribeKey(std::string_view value, TimeMs now) const {
  return gate_->Describe(value, now);
}

std::vector<KeyInfo> Queue::ListKeys(KeyOrder order, size_t limit, TimeMs now) const {
  std::vector<KeyInfo> all;
  gate_->ForEachValue([&](std::string_view v) { all.push_back(DescribeKey(v, now)); });
  auto rank = [order](const KeyInfo& k) -> uint64_t {
    switch (order) {
      case KeyOrder::kRunning:
        return k.running;
      case KeyOrder::kThrottled:  // throttled first, then by pending
        return (k.next_token != 0 ? uint64_t{1} << 63 : 0) | k.pending;
      case KeyOrder::kPending:
        break;
    }
    return k.pending;
  };
  auto before = [&](const KeyInfo& a, const KeyInfo& b) {
    const uint64_t ra = rank(a), rb = rank(b);
    return ra != rb ? ra > rb : a.value < b.value;
  };
  if (all.size() > limit) {
    std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(limit), all.end(), before);
    all.resize(limit);
  } else {
    std::sort(all.begin(), all.end(), before);
  }
  return all;
}

void Queue::NoteReady(bool dequeueable, TimeMs next_refill_before, TimeMs now) {
  if (env_->sink == nullptr) return;
  Effect e;
  e.type = EffectType::kQueueReady;
  e.queue = name_;
  e.time = now;
  e.derived = true;                          // never logged
  if (dequeueable) env_->sink->OnEffect(e);  // long polls retry
  const TimeMs next = NextRefill();
  if (next != INT64_MAX && next < next_refill_before) {
    e.due_at = next;  // the timer thread wakes for the refill
    env_->sink->OnEffect(e);
  }
}

// ---- Export and digest ------------------------------------------------------------------------

void Queue::ExportKeyLimits(EffectSink* visit) const {
  // docs/wal-format.md, "Per-key limits": before the queue's messages.
  if (gate_ != nullptr) {
    gate_->ForEachOverride([&](std::string_view value, const KeyLimits& limits) {
      visit->OnEffect(KeyLimitsEffect(value, limits, gate_->last_collect()));
    });
  }
}

void Queue::ExportBuckets(EffectSink* visit) const {
  // The token buckets after the messages (docs/wal-format.md, "Token buckets"): the gate's
  // record first, then each key with tat_us > 0. Only when there is bucket state.
  const bool keys = gate_ != nullptr && (settings_.key_rate_milli != 0 || gate_->HasBuckets());
  if (keys || settings_.rate_milli != 0 || queue_tat_us_ > 0) {
    Effect g;
    g.type = EffectType::kKeyStateRestated;
    g.gate_record = true;
    g.queue = name_;
    g.time = gate_ != nullptr ? gate_->last_collect() : 0;
    g.tat_us = queue_tat_us_;
    visit->OnEffect(g);
  }
  if (keys) {
    gate_->ForEachBucket([&](std::string_view value, int64_t tat_us) {
      Effect k;
      k.type = EffectType::kKeyStateRestated;
      k.queue = name_;
      k.time = gate_->last_collect();
      k.id = value;
      k.tat_us = tat_us;
      visit->OnEffect(k);
    });
  }
}

void Queue::HashFlowInto(void* xxh3_state) const {
  // Each part only when not the default, so that the digests of queues without it are as they
  // were before it existed.
  auto* st = static_cast<XXH3_state_t*>(xxh3_state);
  auto put = [st](const auto& v) { XXH3_64bits_update(st, &v, sizeof(v)); };
  auto put_str = [&](std::string_view s) {
    put(static_cast<uint64_t>(s.size()));
    XXH3_64bits_update(st, s.data(), s.size());
  };
  const QueueSettings& s = settings_;
  if (s.key_rate_milli != 0 || s.key_burst != 1) {
    put(uint8_t{28});
    put(s.key_rate_milli);
    put(s.key_burst);
  }
  if (gate_ != nullptr) gate_->HashInto(st, s.key_rate_milli != 0);  // only with bucket state
  if (s.fairness != Fairness::kNone || s.overdue_first_ms != 0) {
    put(uint8_t{30});
    put(static_cast<uint8_t>(s.fairness));
    put(s.overdue_first_ms);
  }
  if (gate_ != nullptr && gate_->overrides() != 0) {  // only with overrides
    put(uint8_t{51});
    gate_->ForEachOverride([&](std::string_view value, const KeyLimits& l) {  // in value order
      put_str(value);
      const uint64_t fields[5] = {l.set, l.concurrency, l.rate_milli, l.burst, l.weight};
      XXH3_64bits_update(st, fields, sizeof(fields));
    });
  }
  if (s.rate_milli != 0 || s.burst != 1 || queue_tat_us_ > 0) {
    put(uint8_t{29});
    put(s.rate_milli);
    put(s.burst);
    put(queue_tat_us_);
  }
}

}  // namespace sundial
