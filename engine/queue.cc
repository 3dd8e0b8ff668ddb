#include "engine/queue.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/engine.h"
#include "engine/key_gate.h"
#include "engine/metadata.h"
#include "engine/pages.h"

namespace sundial {
namespace {

constexpr uint8_t Bit(MessageState s) { return static_cast<uint8_t>(1u << static_cast<int>(s)); }

size_t StateIndex(MessageState s) { return static_cast<size_t>(s); }

// A fresh lease token in [1, 2^53).
uint64_t NewToken(Random* rng) {
  uint64_t t = rng->Next() >> 11;
  return t == 0 ? 1 : t;
}

// A ULID: 48-bit ms timestamp then 80 random bits, 26 characters of Crockford base32.
std::string GenerateUlid(TimeMs now, Random* rng) {
  static constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  unsigned __int128 v = static_cast<unsigned __int128>(static_cast<uint64_t>(now) & 0xFFFFFFFFFFFF)
                        << 80;
  v |= static_cast<unsigned __int128>(rng->Next() & 0xFFFF) << 64;
  v |= rng->Next();
  std::string out(26, '0');
  for (int i = 25; i >= 0; --i) {
    out[i] = kAlphabet[static_cast<unsigned>(v & 31)];
    v >>= 5;
  }
  return out;
}

// The packed metadata of `packed` with x-origin-queue = origin (replacing an existing one).
std::string WithOrigin(std::string_view packed, std::string_view origin) {
  Metadata md;
  PackedMetadataReader reader(packed);
  std::string_view k, v;
  while (reader.Next(&k, &v)) {
    if (k != kOriginQueueKey) md.push_back({std::string(k), std::string(v)});
  }
  md.push_back({std::string(kOriginQueueKey), std::string(origin)});
  return PackMetadata(md);
}

std::string EncodeCursor(const Message* m) {
  return std::to_string(m->priority) + "." + std::to_string(m->seq);
}

// Packed metadata read from an effect, as the engine stores it (metadata.h, and the queue's
// x-origin-queue pair beyond the limit): its pair count, or -1 when malformed.
int64_t StoredPairCount(std::string_view packed) {
  PackedMetadataReader reader(packed);
  std::string_view k, v;
  uint32_t pairs = 0;
  while (reader.Next(&k, &v)) ++pairs;
  if (!reader.Valid() || pairs > kMaxMetadataPairs + 1 || packed.size() >= (1u << 13)) return -1;
  return pairs;
}

bool DecodeCursor(std::string_view s, int64_t* priority, uint64_t* seq) {
  size_t dot = s.find('.');
  if (dot == std::string_view::npos) return false;
  auto a = std::from_chars(s.data(), s.data() + dot, *priority);
  auto b = std::from_chars(s.data() + dot + 1, s.data() + s.size(), *seq);
  return a.ec == std::errc() && a.ptr == s.data() + dot && b.ec == std::errc() &&
         b.ptr == s.data() + s.size();
}

}  // namespace

// ---- Small types ------------------------------------------------------------------------------

Random::Random(uint64_t seed) {
  for (auto& s : s_) {
    seed += 0x9E3779B97F4A7C15ULL;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    s = z ^ (z >> 31);
  }
}

uint64_t Random::Next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

size_t StringHash::operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }

size_t Queue::PairHash::operator()(const PairView& p) const {
  uint64_t h = XXH3_64bits(p.key.data(), p.key.size());
  return XXH3_64bits_withSeed(p.value.data(), p.value.size(), h);
}

void ReadyIndex::Widen() {
  const int64_t base = base_;
  narrow_.MoveInto(&wide_, [base](const NarrowEntry& e) {
    return ReadyEntry{base + e.key, e.ref};
  });
  wide_keys_ = true;
}

// ---- Lifetime ---------------------------------------------------------------------------------

Queue::Queue(std::string name, QueueSettings settings, const QueueEnvironment* env,
             std::atomic<uint64_t>* shard_bytes)
    : name_(std::move(name)), settings_(std::move(settings)), env_(env), shard_bytes_(shard_bytes) {
  if (gated()) {
    gate_ = std::make_unique<KeyGate>(&store_, &ready_, gate_key(), gate_limit(), &counts_);
    gate_->SetRate(settings_.key_rate_milli, settings_.key_burst);
    gate_->SetFair(settings_.fairness == Fairness::kWeighted);
  }
}

void Queue::set_settings(const QueueSettings& s) {
  queue_refill_ms_ = 0;  // checked again at the next dequeue
  const bool rate_changed =
      s.key_rate_milli != settings_.key_rate_milli || s.key_burst != settings_.key_burst;
  settings_ = s;
  if (gate_ != nullptr) {
    gate_->SetLimit(gate_limit());
    if (rate_changed) gate_->SetRate(settings_.key_rate_milli, settings_.key_burst);
    gate_->SetFair(settings_.fairness == Fairness::kWeighted);
  }
}

TimeMs Queue::NextDueTime() const {
  const TimeMs timer = timers_.empty() ? INT64_MAX : timers_.top().due_at;
  return std::min({timer, expiry_.next(), NextRefill()});
}

Queue::~Queue() { Clear(); }

void Queue::Clear() {
  ready_.Clear();
  timers_.Clear();
  expiry_.Clear();
  held_.clear();
  if (gate_ != nullptr) gate_->Clear();
  filters_.clear();
  errors_.Clear();
  results_.Clear();
  histories_.Clear();
  wide_.clear();
  if (large_bytes_ > 0) {
    store_.ForEach([](MessageRef, const Message* m) {
      if (char* block = m->large_block()) pages::Free(block, m->payload().size());
    });
  }
  ids_.Clear();
  store_.Clear();
  lease_hints_.clear();
  large_bytes_ = 0;
  AddShardBytes(-static_cast<int64_t>(memory_bytes_));
  memory_bytes_ = 0;
  counts_ = StateCounts{};
}

uint64_t Queue::allocated_bytes() const {
  uint64_t total = store_.allocated_bytes() + large_bytes_ + ids_.allocated_bytes() +
                   ready_.capacity_bytes() + timers_.capacity_bytes() + expiry_.capacity_bytes();
  if (gate_ != nullptr) total += gate_->allocated_bytes();
  for (const auto& [pair, index] : filters_) {
    total += index.pending.capacity_bytes() + sizeof(PairIndex) + pair.key.size() +
             pair.value.size() + 96;
  }
  total += errors_.allocated_bytes() + results_.allocated_bytes() + histories_.allocated_bytes();
  total += wide_.size() * (sizeof(MessageRef) + sizeof(WideFields));
  total += held_.size() * (sizeof(uint64_t) + sizeof(Timing));
  return total;
}

QueueInfo Queue::Info(TimeMs now) const {
  QueueInfo info;
  info.name = name_;
  info.settings = settings_;
  info.counts = counts_;
  info.memory_bytes = memory_bytes_;
  info.throttled_dequeues = throttled_dequeues_;
  if (!ready_.empty() && !bulk_) {
    info.oldest_pending_age_ms = std::max<int64_t>(0, now - At(ready_.top_ref())->enqueued_at);
  }
  return info;
}

Queue::Timing Queue::TimingOf(const Message* m) const {
  if (m->state() == MessageState::kPending) return {};
  if (m->slot == kNoSlot) return held_.find(m->seq)->second;  // a held dependency, disarmed
  const TimerEntry& e = timers_.at(m->slot);
  return {e.due_at, e.token};
}

MessageRef Queue::Insert(std::string_view id, uint64_t hash, std::string_view payload,
                         std::string_view packed_metadata, uint32_t pair_count, TimeMs expires_at) {
  char* large = nullptr;
  if (payload.size() > kInlinePayloadBytes) {
    large = static_cast<char*>(pages::Allocate(payload.size()));
    std::memcpy(large, payload.data(), payload.size());
    large_bytes_ += payload.size();
  }
  const bool key_slot = gated();
  const size_t metadata_len = pair_count == 0 ? 0 : packed_metadata.size();
  const bool expiry = expires_at != 0;
  const MessageRef ref = store_.Allocate(
      Message::RecordBytes(id.size(), metadata_len, payload.size(), pair_count, key_slot, expiry));
  Message* m =
      Message::Init(At(ref), id, packed_metadata, payload, pair_count, key_slot, large, expiry);
  if (expiry) m->set_expires_at(expires_at);
  ids_.Insert(ref, hash);
  uint64_t bytes = AccountedBytes(ref, m);
  memory_bytes_ += bytes;
  AddShardBytes(static_cast<int64_t>(bytes));
  return ref;
}

void Queue::Erase(MessageRef ref) {
  Message* m = At(ref);
  if (m->in_graph()) --graph_messages_;
  ids_.Erase(ref, m->id());
  uint64_t bytes = AccountedBytes(ref, m);
  if (m->has_error()) errors_.Erase(ref);
  if (m->has_result()) results_.Erase(ref);
  if (m->has_history()) histories_.Erase(ref);
  if (m->wide()) wide_.erase(ref);
  memory_bytes_ -= bytes;
  AddShardBytes(-static_cast<int64_t>(bytes));
  if (char* block = m->large_block()) {
    large_bytes_ -= m->payload().size();
    pages::Free(block, m->payload().size());
  }
  store_.Free(ref);
}

void Queue::Stamp(MessageRef ref, uint64_t version, TimeMs updated_at) {
  Message* m = At(ref);
  TimeMs delta;
  const bool fits = version <= UINT32_MAX &&
                    !__builtin_sub_overflow(updated_at, m->enqueued_at, &delta) && delta >= 0 &&
                    delta <= TimeMs{UINT32_MAX};
  if (fits) {
    if (m->wide()) wide_.erase(ref);
    m->set_wide(false);
    m->version32 = static_cast<uint32_t>(version);
    m->updated_delta = static_cast<uint32_t>(delta);
  } else {
    m->set_wide(true);
    wide_[ref] = WideFields{version, updated_at};
  }
  // Every logged change is stamped, live and on replay, with the same time: the one place the
  // gate collects cooling keys, so that every node keeps the same key set (key_gate.h). Throttled
  // keys whose token is back by then come back too (as at a dequeue or Advance): a throttled
  // key whose refill is due ends so at the queue's next change, whether or not that change
  // frees it, and a long poll is told.
  if (gate_ != nullptr) {
    gate_->Collect(updated_at);
    if (gate_->rated() && gate_->Refill(updated_at) > 0) {
      NoteReady(/*dequeueable=*/true, INT64_MIN, updated_at);
    }
  }
}

uint64_t Queue::AccountedBytes(MessageRef ref, const Message* m) const {
  return kMessageOverheadBytes + m->id().size() + m->payload().size() +
         m->packed_metadata().size() + ResultOf(m, ref).size() +
         (m->has_history()        ? histories_.Block(ref).size()
          : m->history_implicit() ? kEnqueuedBlockBytes
                                  : 0);
}

void Queue::SetError(MessageRef ref, std::string_view error) {
  Message* m = At(ref);
  if (error.empty() && !m->has_error()) return;
  (void)errors_.Set(ref, error);
  m->set_has_error(!error.empty());
}

void Queue::SetResult(MessageRef ref, std::string_view result) {
  Message* m = At(ref);
  if (result.empty() && !m->has_result()) return;
  const int64_t delta = results_.Set(ref, result);
  m->set_has_result(!result.empty());
  AddMemoryBytes(delta);
}

// ---- Structure maintenance --------------------------------------------------------------------

void Queue::AttachPairs(MessageRef ref, bool pending) {
  Message* m = At(ref);
  if (m->pair_count() == 0) return;
  PackedMetadataReader reader(m->packed_metadata());
  std::string_view k, v;
  for (uint32_t i = 0; reader.Next(&k, &v); ++i) {
    auto it = filters_.find(PairView{k, v});
    if (it == filters_.end()) {
      it = filters_.emplace(PairKey{std::string(k), std::string(v)}, PairIndex(&store_)).first;
      if (bulk_) it->second.pending.BeginUnordered();
    }
    ++it->second.counts[StateIndex(m->state())];
    if (pending) it->second.pending.Push(FilterEntry{ref, static_cast<uint16_t>(i)});
  }
}

void Queue::DetachPairs(MessageRef ref, bool pending) {
  Message* m = At(ref);
  if (m->pair_count() == 0) return;
  PackedMetadataReader reader(m->packed_metadata());
  std::string_view k, v;
  for (uint32_t i = 0; reader.Next(&k, &v); ++i) {
    auto it = filters_.find(PairView{k, v});
    --it->second.counts[StateIndex(m->state())];
    if (pending) it->second.pending.Remove(m->filter_slot(i));
    if (it->second.unused()) filters_.erase(it);
  }
}

void Queue::Attach(MessageRef ref, Timing timing) {
  Message* m = At(ref);
  const MessageState state = m->state();
  ++counts_.by_state[StateIndex(state)];
  AttachPairs(ref, state == MessageState::kPending);
  if (m->has_expiry() && (state == MessageState::kPending || state == MessageState::kInvisible)) {
    expiry_.Push(ref, m);
  }
  switch (state) {
    case MessageState::kPending:
      if (gate_ != nullptr) {
        gate_->AttachPending(ref, m);
      } else {
        ready_.Push({m->priority, ref});
      }
      break;
    case MessageState::kRunning:
      timers_.Push({timing.due_at, timing.token, ref});
      if (gate_ != nullptr) gate_->AttachRunning(m);
      break;
    default:
      timers_.Push({timing.due_at, timing.token, ref});
      break;
  }
}

void Queue::Detach(MessageRef ref) {
  Message* m = At(ref);
  const MessageState state = m->state();
  --counts_.by_state[StateIndex(state)];
  DetachPairs(ref, state == MessageState::kPending);
  if (m->has_expiry()) expiry_.Remove(m);
  switch (state) {
    case MessageState::kPending:
      if (gate_ != nullptr) {
        gate_->DetachPending(ref, m);
      } else {
        ready_.Remove(m->slot);
      }
      break;
    case MessageState::kRunning:
      timers_.Remove(m->slot);
      if (gate_ != nullptr) gate_->DetachRunning(m);
      break;
    default:
      if (m->slot == kNoSlot) {
        held_.erase(m->seq);
      } else {
        timers_.Remove(m->slot);
      }
      break;
  }
}

MessageState Queue::BeginChange(MessageRef ref, Timing* old) {
  const Message* m = At(ref);
  const MessageState from = m->state();
  if (old != nullptr) *old = TimingOf(m);
  Detach(ref);
  return from;
}

void Queue::FinishChange(MessageRef ref, MessageState from, MessageState to, TimeMs now,
                         ChangeCause cause, Timing timing, std::string_view worker_id,
                         uint64_t ended_lease) {
  Message* m = At(ref);
  m->set_state(to);
  Stamp(ref, VersionOf(ref, m) + 1, now);
  Attach(ref, timing);
  Emit(EffectType::kMessageChanged, cause, from, ref, now, {}, worker_id, ended_lease);
}

void Queue::MakeTerminal(MessageRef ref, MessageState to, TimeMs now, ChangeCause cause) {
  Timing old;
  MessageState from = BeginChange(ref, &old);
  const bool in_graph = At(ref)->in_graph();
  // Retention 0 outside the dependency graph: removed by this operation (docs/semantics.md,
  // "Retention"), so no timer is armed for it (due_at 0 in the effect: never due).
  const bool remove_now = settings_.retention_ms == 0 && !in_graph;
  Timing timing{remove_now ? 0 : SaturatingAdd(now, settings_.retention_ms),
                to == MessageState::kCompleted ? old.token : 0};
  FinishChange(ref, from, to, now, cause, timing, {},
               from == MessageState::kRunning ? old.token : 0);
  if (remove_now) {
    Emit(EffectType::kMessageRemoved, ChangeCause::kNone, to, ref, now);
    Detach(ref);
    Erase(ref);
    return;
  }
  if (in_graph && env_->dependencies != nullptr) {
    env_->dependencies->OnTerminal(*this, At(ref)->id(), from, to, now);
  }
}

Effect Queue::MessageEffect(EffectType type, MessageRef ref, TimeMs time) const {
  const Message* m = At(ref);
  const Timing timing = TimingOf(m);
  Effect e;
  e.type = type;
  e.time = time;
  e.queue = name_;
  e.id = m->id();
  e.from = e.to = m->state();
  e.seq = m->seq;
  e.version = VersionOf(ref, m);
  e.priority = m->priority;
  e.attempts = m->attempts();
  e.max_attempts = m->max_attempts();
  e.due_at = timing.due_at;
  e.lease_token = timing.token;
  e.enqueued_at = m->enqueued_at;
  e.payload = m->payload();
  e.packed_metadata = m->packed_metadata();
  e.error = ErrorOf(m, ref);
  e.result = ResultOf(m, ref);
  e.expires_at = m->expires_at();
  return e;
}

void Queue::Emit(EffectType type, ChangeCause cause, MessageState from, MessageRef ref, TimeMs now,
                 std::string_view dead_letter_queue, std::string_view worker_id,
                 uint64_t ended_lease) {
  const bool history = settings_.history_max > 0 && type != EffectType::kMessageRemoved;
  const bool report = env_->sink != nullptr && !silenced_;
  if (!history && !report) return;
  Effect e = MessageEffect(type, ref, now);
  e.cause = cause;
  e.from = from;
  e.dead_letter_queue = dead_letter_queue;
  e.derived = emit_derived_;
  e.worker_id = worker_id;
  if (history) RecordHistory(ref, e, ended_lease);
  if (report) env_->sink->OnEffect(e);
}

void Queue::RecordHistory(MessageRef ref, const Effect& e, uint64_t ended_lease) {
  if (settings_.history_max == 0) return;
  Message* m = At(ref);
  if (m->history_implicit()) {
    // A second entry: the enqueue becomes a block (its bytes are counted already).
    EnqueuedBlockBuffer buffer;
    (void)histories_.Restore(ref, EnqueuedBlock(m->enqueued_at, buffer));
    m->set_history_implicit(false);
    m->set_has_history(true);
  } else if (!m->has_history() && e.type == EffectType::kMessageEnqueued && !e.restated &&
             e.to == MessageState::kPending && e.attempts == 0 && e.time == m->enqueued_at) {
    // What Record would write, kept as a bit: no allocation for a message only enqueued.
    m->set_history_implicit(true);
    AddMemoryBytes(static_cast<int64_t>(kEnqueuedBlockBytes));
    return;
  }
  const int64_t delta = histories_.Record(ref, e, settings_.history_max, ended_lease);
  if (delta == 0) return;
  m->set_has_history(true);
  AddMemoryBytes(delta);
}

std::string_view Queue::HistoryBlock(MessageRef ref, const Message* m,
                                     EnqueuedBlockBuffer& buffer) const {
  if (m->history_implicit()) return EnqueuedBlock(m->enqueued_at, buffer);
  return m->has_history() ? histories_.Block(ref) : std::string_view();
}

void Queue::RestoreHistory(MessageRef ref, std::string_view block) {
  Message* m = At(ref);
  EnqueuedBlockBuffer buffer;
  if (block == kEnqueuedHistoryMark || block == EnqueuedBlock(m->enqueued_at, buffer)) {
    m->set_history_implicit(true);
    AddMemoryBytes(static_cast<int64_t>(kEnqueuedBlockBytes));
  } else if (const int64_t delta = histories_.Restore(ref, block); delta != 0) {
    m->set_has_history(true);
    AddMemoryBytes(delta);
  }
}

// ---- Selection --------------------------------------------------------------------------------

bool Queue::Matches(const Message* m, const Filter& filter) const {
  for (const auto& pair : filter) {
    auto v = FindMetadataValue(m->packed_metadata(), pair.key);
    if (!v || *v != pair.value) return false;
  }
  return true;
}

bool Queue::Blocked(const Message* m) const { return gate_ != nullptr && !gate_->Dispatchable(m); }

void Queue::CountBlocked(const Message* m, StateCounts* out) const {
  if (gate_ == nullptr) return;
  const KeyGate::BlockReason why = gate_->ReasonOf(m);
  if (why == KeyGate::BlockReason::kNone) return;
  ++out->blocked;
  ++(why == KeyGate::BlockReason::kConcurrency ? out->blocked_concurrency : out->blocked_rate);
}

const Queue::PairIndex* Queue::MostSelective(const Filter& filter) const {
  const PairIndex* best = nullptr;
  for (const auto& pair : filter) {
    auto it = filters_.find(PairView{pair.key, pair.value});
    if (it == filters_.end()) return nullptr;
    if (best == nullptr || it->second.pending.size() < best->pending.size()) best = &it->second;
  }
  return best;
}

MessageRef Queue::SelectPending(const Filter& filter) const {
  if (filter.empty()) return ready_.empty() ? kNoRef : ready_.top_ref();
  const PairIndex* index = MostSelective(filter);
  if (index == nullptr || index->pending.empty()) return kNoRef;
  const FilterHeap& heap = index->pending;
  if (filter.size() == 1 && !gated()) return heap.top().ref;
  // Best-first walk of the heap in (priority, seq) order until a match that is not blocked.
  auto later = [&heap](uint32_t a, uint32_t b) {
    return heap.traits().Less(heap.at(b), heap.at(a));
  };
  std::vector<uint32_t> frontier{0};
  while (!frontier.empty()) {
    std::pop_heap(frontier.begin(), frontier.end(), later);
    uint32_t slot = frontier.back();
    frontier.pop_back();
    const MessageRef ref = heap.at(slot).ref;
    const Message* m = At(ref);
    if (Matches(m, filter) && !Blocked(m)) return ref;
    size_t first = size_t{slot} * FilterHeap::arity() + 1;
    for (size_t c = first; c < first + FilterHeap::arity() && c < heap.size(); ++c) {
      frontier.push_back(static_cast<uint32_t>(c));
      std::push_heap(frontier.begin(), frontier.end(), later);
    }
  }
  return kNoRef;
}

bool Queue::PriorityOrder(MessageRef a, MessageRef b) const {
  const Message* x = At(a);
  const Message* y = At(b);
  return x->priority != y->priority ? x->priority < y->priority : x->seq < y->seq;
}

std::vector<MessageRef> Queue::Matching(const Filter& filter, bool sorted) const {
  std::vector<MessageRef> out;
  store_.ForEach([&](MessageRef ref, const Message* m) {
    if (Matches(m, filter)) out.push_back(ref);
  });
  if (sorted) {
    std::sort(out.begin(), out.end(),
              [this](MessageRef a, MessageRef b) { return PriorityOrder(a, b); });
  }
  return out;
}

void Queue::RememberLease(MessageRef ref, uint64_t token) {
  // Room for about as many hints as there are running messages (at most 64K).
  constexpr size_t kMinHints = 64, kMaxHints = size_t{1} << 16;
  const size_t want =
      std::clamp<size_t>(std::bit_ceil(counts_[MessageState::kRunning]), kMinHints, kMaxHints);
  if (lease_hints_.size() < want) lease_hints_.assign(want, LeaseHint{});
  lease_hints_[token & (lease_hints_.size() - 1)] = LeaseHint{token, ref};
}

MessageRef Queue::FindLeased(std::string_view id, uint64_t token) const {
  if (token != 0 && !lease_hints_.empty()) {
    const LeaseHint& hint = lease_hints_[token & (lease_hints_.size() - 1)];
    // The hint may be stale (the message gone, its slot reused): it is used only when the
    // record there is live and has this id, which then makes it the message Find would return.
    if (hint.token == token && store_.IsLive(hint.ref) && At(hint.ref)->id() == id) {
      return hint.ref;
    }
  }
  return Find(id);
}

Status Queue::CheckLease(const Message* m, uint64_t token, TimeMs now) const {
  if (m->state() != MessageState::kRunning) {
    return FailedPrecondition("lease_token: not the current lease of this message");
  }
  const Timing timing = TimingOf(m);
  if (token == 0 || timing.token != token) {
    return FailedPrecondition("lease_token: not the current lease of this message");
  }
  if (now >= timing.due_at) return FailedPrecondition("lease_token: the lease has expired");
  return Status::Ok();
}

MessageRecord Queue::Record(MessageRef ref) const {
  const Message* m = At(ref);
  const Timing timing = TimingOf(m);
  const MessageState state = m->state();
  MessageRecord r;
  r.queue = name_;
  r.id = std::string(m->id());
  r.priority = m->priority;
  r.payload = std::string(m->payload());
  r.metadata = UnpackMetadata(m->packed_metadata()).value_or(Metadata{});
  r.state = state;
  r.attempts = m->attempts();
  r.max_attempts = m->max_attempts();
  if (state == MessageState::kInvisible) r.visible_at = timing.due_at;
  if (state == MessageState::kWaiting) r.visible_at = timing.token;  // once released (queue.h)
  if (state == MessageState::kRunning) r.lease_expires_at = timing.due_at;
  if (state == MessageState::kRunning || state == MessageState::kCompleted) {
    r.lease_token = timing.token;
  }
  r.version = VersionOf(ref, m);
  r.enqueued_at = m->enqueued_at;
  r.updated_at = UpdatedAtOf(ref, m);
  r.last_error = std::string(ErrorOf(m, ref));
  r.result = std::string(ResultOf(m, ref));
  r.expires_at = m->expires_at();
  return r;
}

// ---- Operations -------------------------------------------------------------------------------

Result<EnqueueResult> Queue::Enqueue(const EnqueueItem& item, TimeMs now, Random* rng,
                                     uint64_t memory_budget, uint64_t memory_used,
                                     const Status& budget_exhausted) {
  if (gated()) {
    bool has_key = false;
    for (const auto& p : item.metadata) has_key |= p.key == gate_key();
    if (!has_key) {
      return InvalidArgument(exclusive() ? "metadata: missing the queue's exclusivity_key"
                                         : "metadata: missing the queue's flow_key");
    }
  }
  std::string generated;
  std::string_view id = item.id;
  uint64_t hash;
  MessageRef release = kNoRef;  // a terminal message whose id this enqueue takes (dedupe)
  if (id.empty()) {
    do {
      generated = GenerateUlid(now, rng);
      hash = IdTable::Hash(generated);
    } while (ids_.Find(generated, hash) != kNoRef);
    id = generated;
  } else {
    hash = IdTable::Hash(id);
    // One lookup of the id serves debounce, id release and the duplicate check.
    if (const MessageRef found = ids_.Find(id, hash); found != kNoRef) {
      const Message* existing = At(found);
      const MessageState state = existing->state();
      // Debounce and dedupe while_active (docs/semantics.md, "Debounce", "Releasing ids").
      if (item.debounce_ms && item.depends_on.empty() && item.batch.empty()) {
        if (state == MessageState::kPending || state == MessageState::kInvisible) {
          return Debounce(found, item, now, memory_budget, memory_used, budget_exhausted);
        }
        if (state == MessageState::kRunning) {
          return EnqueueResult{std::string(id), VersionOf(found, existing), true};
        }
      }
      if (!resend_ && Releases(item, found)) {
        release = found;
      } else {
        bool same = existing->priority == item.priority && existing->payload() == item.payload &&
                    (!item.max_attempts || *item.max_attempts == existing->max_attempts()) &&
                    existing->pair_count() == item.metadata.size();
        for (size_t i = 0; same && i < item.metadata.size(); ++i) {
          auto v = FindMetadataValue(existing->packed_metadata(), item.metadata[i].key);
          same = v && *v == item.metadata[i].value;
        }
        if (!same) return AlreadyExists("id: a message with this id and different content exists");
        return EnqueueResult{std::string(id), VersionOf(found, existing), true};
      }
    }
  }
  if (settings_.enqueue_paused && !forced_) return FailedPrecondition("queue: enqueue is paused");
  if (settings_.max_depth > 0 && !forced_) {
    // Non-terminal (SPEC §1): waiting messages count too.
    uint64_t live = counts_[MessageState::kInvisible] + counts_[MessageState::kPending] +
                    counts_[MessageState::kRunning] + counts_[MessageState::kWaiting];
    if (live >= settings_.max_depth) return ResourceExhausted("queue: max_depth reached");
  }
  thread_local std::string packed;
  packed.clear();
  AppendPackedMetadata(item.metadata, &packed);
  uint64_t bytes = kMessageOverheadBytes + id.size() + item.payload.size() + packed.size();
  if (memory_budget > 0 && memory_used + bytes > memory_budget) return budget_exhausted;
  TimeMs visible_at = item.visible_at
                          ? *item.visible_at
                          : SaturatingAdd(now, item.delay_ms.value_or(settings_.invisibility_ms));
  if (item.debounce_ms) visible_at = std::max(visible_at, SaturatingAdd(now, *item.debounce_ms));
  if (release != kNoRef) {  // logged as retention would remove it, before the new enqueue
    Emit(EffectType::kMessageRemoved, ChangeCause::kNone, At(release)->state(), release, now);
    Detach(release);
    Erase(release);
  }
  const int64_t ttl = item.ttl_ms.value_or(settings_.ttl_ms);
  const MessageRef ref =
      Insert(id, hash, item.payload, packed, static_cast<uint32_t>(item.metadata.size()),
             ttl > 0 ? SaturatingAdd(now, ttl) : 0);
  Message* m = At(ref);
  m->priority = item.priority;
  m->seq = next_seq_++;
  m->set_max_attempts(item.max_attempts.value_or(settings_.max_attempts));
  m->enqueued_at = now;
  Stamp(ref, 1, now);
  Timing timing;
  if (!item.depends_on.empty()) {
    // Waiting (queue.h): no timer of its own; the entry keeps the visible_at it will have.
    m->set_state(MessageState::kWaiting);
    m->set_in_graph();
    ++graph_messages_;
    timing = {kWaitingDueAt, visible_at > now ? static_cast<uint64_t>(visible_at) : 0};
  } else if (visible_at > now) {
    m->set_state(MessageState::kInvisible);
    timing.due_at = visible_at;
  } else {
    m->set_state(MessageState::kPending);
  }
  Attach(ref, timing);
  if (item.depends_on.empty() && item.batch.empty()) {
    Emit(EffectType::kMessageEnqueued, ChangeCause::kNone, m->state(), ref, now);
  } else {
    Effect e = MessageEffect(EffectType::kMessageEnqueued, ref, now);
    RecordHistory(ref, e);
    if (!item.depends_on.empty()) {
      e.depends_on = &item.depends_on;
      e.on_dependency_failure = item.on_dependency_failure;
    }
    e.batch = item.batch;
    if (env_->sink != nullptr) env_->sink->OnEffect(e);
  }
  return EnqueueResult{std::string(id), 1, false};
}

std::vector<MessageRecord> Queue::Dequeue(const DequeueRequest& request, TimeMs now, Random* rng,
                                          bool every_shard_locked) {
  std::vector<MessageRecord> out;
  if (settings_.dequeue_paused) return out;
  // No delivery after expiry, even when the timer is late (docs/semantics.md, "Expiry").
  (void)ExpireDue(now, every_shard_locked);
  int64_t lease_ms = request.lease_ms.value_or(settings_.lease_ms);
  const bool rated = gate_ != nullptr && gate_->rated();
  const bool queue_rated = settings_.rate_milli != 0;
  const bool fair = gate_ != nullptr && gate_->fair();
  // Buckets refill lazily: a late timer never delays a key.
  const size_t readied = rated ? gate_->Refill(now) : 0;
  if (queue_refill_ms_ != 0 && queue_refill_ms_ <= now) queue_refill_ms_ = 0;
  const TimeMs next_refill = NextRefill();
  bool throttled = false;  // a bucket held a message back (throttled_dequeues_)
  for (uint32_t i = 0; i < request.max;) {
    // The queue's bucket first (docs/semantics.md, "Flow control"), then the key's.
    if (queue_rated && QueueTokenFromUs() > now * 1000) {
      queue_refill_ms_ = (QueueTokenFromUs() + 999) / 1000;
      throttled = !ready_.empty();
      break;
    }
    bool in_turn = false;
    const MessageRef ref =
        fair ? SelectFair(request.filter, now, &in_turn) : SelectPending(request.filter);
    if (ref == kNoRef) break;
    // Left by ExpireDue: in the graph, without every shard's lock (the engine retries so).
    if (At(ref)->has_expiry() && At(ref)->expires_at() <= now) break;
    if (rated && !gate_->HasToken(At(ref), now)) {
      throttled = true;
      gate_->Throttle(At(ref), now);  // out of the ready index until its token: select again
      continue;
    }
    MessageState from = BeginChange(ref);
    Message* m = At(ref);
    m->set_attempts(m->attempts() + 1);
    const uint64_t token = NewToken(rng);
    FinishChange(ref, from, MessageState::kRunning, now, ChangeCause::kLeased,
                 Timing{SaturatingAdd(now, lease_ms), token}, request.worker_id);
    if (rated) gate_->Granted(At(ref), now);  // after the change: replay grants at the same point
    if (in_turn) gate_->Served(At(ref));
    QueueGranted(now);
    RememberLease(ref, token);
    out.push_back(Record(ref));
    ++i;
  }
  if (rated || queue_rated) NoteReady(readied > out.size() && !ready_.empty(), next_refill, now);
  if (throttled || (out.size() < request.max && counts_.blocked_rate != 0)) ++throttled_dequeues_;
  return out;
}

Status Queue::Complete(const CompleteItem& item, TimeMs now) {
  const MessageRef ref = FindLeased(item.id, item.lease_token);
  if (ref == kNoRef) return NotFound("id: no such message");
  const Message* m = At(ref);
  if (m->state() == MessageState::kCompleted && item.lease_token != 0 &&
      TimingOf(m).token == item.lease_token) {
    return Status::Ok();  // a repeated complete with the same token
  }
  if (Status s = CheckLease(m, item.lease_token, now); !s.ok()) return s;
  SetResult(ref, item.result);  // before the effect, which carries it
  MakeTerminal(ref, MessageState::kCompleted, now, ChangeCause::kCompleted);
  return Status::Ok();
}

Result<MessageOutcome> Queue::Outcome(std::string_view id) const {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  const Message* m = At(ref);
  return MessageOutcome{std::string(m->id()), m->state(), std::string(ResultOf(m, ref)),
                        std::string(ErrorOf(m, ref))};
}

bool Queue::CanEnter(const Message* m) const {
  if (Find(m->id()) != kNoRef) return false;
  if (!gated()) return true;
  return FindMetadataValue(m->packed_metadata(), gate_key()).has_value();
}

void Queue::MoveToDeadLetter(MessageRef ref, Queue* dead_letter, uint64_t seq, uint64_t version,
                             uint32_t max_attempts, std::string_view error, TimeMs now, bool emit) {
  const Message* m = At(ref);
  const uint64_t ended_lease = m->state() == MessageState::kRunning ? TimingOf(m).token : 0;
  std::string packed = WithOrigin(m->packed_metadata(), name_);
  const MessageRef moved = dead_letter->Insert(m->id(), IdTable::Hash(m->id()), m->payload(),
                                               packed, PackedPairCount(packed));
  m = At(ref);  // (a different store: `m` stays valid, but read it again for clarity)
  Message* n = dead_letter->At(moved);
  n->priority = m->priority;
  n->seq = seq;
  dead_letter->next_seq_ = std::max(dead_letter->next_seq_, seq + 1);
  n->set_attempts(0);
  n->set_max_attempts(max_attempts);
  n->enqueued_at = m->enqueued_at;
  dead_letter->Stamp(moved, version, now);
  n->set_state(MessageState::kPending);
  dead_letter->SetError(moved, error);
  dead_letter->Attach(moved, Timing{});
  if (m->has_history()) {  // the history goes with it (docs/semantics.md, "History")
    const auto bytes =
        static_cast<int64_t>(histories_.MoveTo(ref, &dead_letter->histories_, moved));
    At(ref)->set_has_history(false);
    AddMemoryBytes(-bytes);
    n->set_has_history(true);
    dead_letter->AddMemoryBytes(bytes);
  } else if (m->history_implicit()) {  // the same enqueue: `n` has m's enqueued_at
    At(ref)->set_history_implicit(false);
    AddMemoryBytes(-static_cast<int64_t>(kEnqueuedBlockBytes));
    n->set_history_implicit(true);
    dead_letter->AddMemoryBytes(static_cast<int64_t>(kEnqueuedBlockBytes));
  }
  // The moved message's new state, reported under the source queue's name.
  Effect e = dead_letter->MessageEffect(EffectType::kMessageDeadLettered, moved, now);
  e.queue = name_;
  e.from = m->state();
  e.dead_letter_queue = dead_letter->name_;
  dead_letter->RecordHistory(moved, e, ended_lease);
  if (emit && env_->sink != nullptr) env_->sink->OnEffect(e);
  const MessageState from = m->state();
  const bool in_graph = m->in_graph();
  const std::string id = in_graph ? std::string(m->id()) : std::string();
  Detach(ref);
  Erase(ref);
  // Replay (!emit): the engine tells the graph itself (Engine::Apply).
  if (emit && in_graph && env_->dependencies != nullptr) {
    env_->dependencies->OnDeadLettered(*this, id, from, now);
  }
}

bool Queue::ErrorOrDeadLetter(MessageRef ref, TimeMs now, ChangeCause cause, Queue* dead_letter) {
  const Message* m = At(ref);
  if (dead_letter != nullptr && dead_letter != this && dead_letter->CanEnter(m)) {
    MoveToDeadLetter(ref, dead_letter, dead_letter->next_seq_, VersionOf(ref, m) + 1,
                     dead_letter->settings_.max_attempts, ErrorOf(m, ref), now, /*emit=*/true);
    return true;
  }
  MakeTerminal(ref, MessageState::kErrored, now, cause);
  return false;
}

Result<FailResult> Queue::Fail(const FailRequest& request, TimeMs now, Random* rng,
                               Queue* dead_letter) {
  const MessageRef ref = FindLeased(request.id, request.lease_token);
  if (ref == kNoRef) return NotFound("id: no such message");
  if (Status s = CheckLease(At(ref), request.lease_token, now); !s.ok()) return s;
  std::string_view error = request.error;
  if (error.size() > kMaxErrorBytes) {
    size_t cut = kMaxErrorBytes;
    while (cut > 0 && (static_cast<uint8_t>(error[cut]) & 0xC0) == 0x80) --cut;
    error = error.substr(0, cut);
  }
  SetError(ref, error);
  FailResult result;
  const Message* m = At(ref);
  if (m->attempts() >= m->max_attempts()) {
    std::string dead_letter_name = dead_letter ? dead_letter->name_ : std::string();
    if (ErrorOrDeadLetter(ref, now, ChangeCause::kFailed, dead_letter)) {
      result.dead_letter_queue = std::move(dead_letter_name);
    }
    result.state = MessageState::kErrored;
    return result;
  }
  int64_t delay;
  if (request.retry_delay_ms) {
    delay = *request.retry_delay_ms;
  } else {
    uint32_t shift = std::min<uint32_t>(m->attempts() - 1, 62);
    int64_t base = settings_.retry_backoff_ms;
    int64_t cap = settings_.retry_backoff_max_ms;
    int64_t d = (base > 0 && base > (cap >> shift)) ? cap : std::min(cap, base << shift);
    delay = std::llround(static_cast<double>(d) * (0.9 + 0.2 * rng->NextUnit()));
  }
  Timing old;
  MessageState from = BeginChange(ref, &old);
  if (delay <= 0) {
    FinishChange(ref, from, MessageState::kPending, now, ChangeCause::kFailed, Timing{}, {},
                 old.token);
    result.state = MessageState::kPending;
  } else {
    const TimeMs visible_at = SaturatingAdd(now, delay);
    FinishChange(ref, from, MessageState::kInvisible, now, ChangeCause::kFailed,
                 Timing{visible_at, 0}, {}, old.token);
    result.state = MessageState::kInvisible;
    result.visible_at = visible_at;
  }
  return result;
}

Result<TimeMs> Queue::Extend(std::string_view id, uint64_t token, int64_t lease_ms, TimeMs now) {
  const MessageRef ref = FindLeased(id, token);
  if (ref == kNoRef) return NotFound("id: no such message");
  Message* m = At(ref);
  if (Status s = CheckLease(m, token, now); !s.ok()) return s;
  const TimeMs due = SaturatingAdd(now, lease_ms);
  timers_.Update(m->slot, {due, token, ref});
  Stamp(ref, VersionOf(ref, m) + 1, now);
  Emit(EffectType::kMessageChanged, ChangeCause::kExtended, MessageState::kRunning, ref, now);
  return due;
}

Status Queue::Cancel(std::string_view id, TimeMs now) {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  const MessageState state = At(ref)->state();
  if (state == MessageState::kCanceled) return Status::Ok();
  if (IsTerminal(state)) return FailedPrecondition("state: the message is completed or errored");
  MakeTerminal(ref, MessageState::kCanceled, now, ChangeCause::kCanceled);
  return Status::Ok();
}

uint64_t Queue::CancelByFilter(const Filter& filter, TimeMs now) {
  std::vector<MessageRef> victims = Matching(filter, /*sorted=*/true);
  uint64_t n = 0;
  for (MessageRef ref : victims) {
    if (IsTerminal(At(ref)->state())) continue;
    MakeTerminal(ref, MessageState::kCanceled, now, ChangeCause::kCanceled);
    ++n;
  }
  return n;
}

Result<uint64_t> Queue::Reprioritize(std::string_view id, const ReprioritizeRequest& r,
                                     TimeMs now) {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  Message* m = At(ref);
  if (m->state() != MessageState::kInvisible && m->state() != MessageState::kPending) {
    return FailedPrecondition("state: only invisible or pending messages can be reprioritized");
  }
  MessageState to = m->state();
  Timing old;
  MessageState from = BeginChange(ref, &old);
  TimeMs due = old.due_at;
  if (r.visible_at) {
    to = *r.visible_at > now ? MessageState::kInvisible : MessageState::kPending;
    due = *r.visible_at > now ? *r.visible_at : 0;
  }
  if (r.priority) m->priority = *r.priority;
  FinishChange(ref, from, to, now, ChangeCause::kReprioritized, Timing{due, 0});
  return VersionOf(ref, m);
}

uint64_t Queue::ReprioritizeByFilter(const Filter& filter, const ReprioritizeRequest& r,
                                     TimeMs now) {
  std::vector<MessageRef> targets = Matching(filter, /*sorted=*/true);
  uint64_t n = 0;
  for (MessageRef ref : targets) {
    const Message* m = At(ref);
    if (m->state() != MessageState::kInvisible && m->state() != MessageState::kPending) continue;
    (void)Reprioritize(m->id(), r, now);
    ++n;
  }
  return n;
}

Status Queue::Redrive(std::string_view id, TimeMs now) {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  if (At(ref)->state() != MessageState::kErrored) {
    return FailedPrecondition("state: only errored messages can be redriven");
  }
  MessageState from = BeginChange(ref);
  At(ref)->set_attempts(0);
  FinishChange(ref, from, MessageState::kPending, now, ChangeCause::kRedriven, Timing{});
  return Status::Ok();
}

uint64_t Queue::RedriveByFilter(const Filter& filter, TimeMs now) {
  std::vector<MessageRef> targets = Matching(filter, /*sorted=*/true);
  uint64_t n = 0;
  for (MessageRef ref : targets) {
    if (At(ref)->state() != MessageState::kErrored) continue;
    (void)Redrive(At(ref)->id(), now);
    ++n;
  }
  return n;
}

uint64_t Queue::Purge(uint8_t state_mask, TimeMs now, bool emit,
                      std::vector<RemovedFromQueue>* removed_in_graph) {
  std::vector<MessageRef> victims;
  store_.ForEach([&](MessageRef ref, const Message* m) {
    if (state_mask & Bit(m->state())) victims.push_back(ref);
  });
  for (MessageRef ref : victims) {
    const Message* m = At(ref);
    if (removed_in_graph != nullptr && m->in_graph()) {
      removed_in_graph->push_back({std::string(m->id()), m->state()});
    }
    Detach(ref);
    Erase(ref);
  }
  if (emit && env_->sink != nullptr) {
    Effect e;
    e.type = EffectType::kQueuePurged;
    e.time = now;
    e.queue = name_;
    e.purge_states = state_mask;
    env_->sink->OnEffect(e);
  }
  return victims.size();
}

bool Queue::Advance(TimeMs now, Queue* dead_letter, bool dead_letter_unlocked,
                    bool every_shard_locked, uint64_t* count) {
  // Throttled keys whose token is back (never hashed state): long polls try again.
  bool refilled = gate_ != nullptr && gate_->rated() && gate_->Refill(now) > 0;
  if (queue_refill_ms_ != 0 && queue_refill_ms_ <= now) {
    queue_refill_ms_ = 0;
    refilled = true;
  }
  if (refilled) NoteReady(/*dequeueable=*/true, INT64_MIN, now);
  // Before each timer, the expiries due (also those of messages a timer just made pending or
  // invisible): one order, whatever the pass that gets interrupted (docs/semantics.md, "Expiry").
  while (true) {
    if (!ExpireDue(now, every_shard_locked, count)) return false;
    if (timers_.empty() || timers_.top().due_at > now) break;
    const MessageRef ref = timers_.top().ref;
    Message* m = At(ref);
    switch (m->state()) {
      case MessageState::kInvisible: {
        MessageState from = BeginChange(ref);
        FinishChange(ref, from, MessageState::kPending, now, ChangeCause::kBecameVisible, Timing{});
        break;
      }
      case MessageState::kRunning: {
        if (m->attempts() < m->max_attempts()) {
          Timing old;
          MessageState from = BeginChange(ref, &old);
          FinishChange(ref, from, MessageState::kPending, now, ChangeCause::kLeaseExpired, Timing{},
                       {}, old.token);
        } else {
          if (dead_letter_unlocked || (m->in_graph() && !every_shard_locked)) return false;
          ErrorOrDeadLetter(ref, now, ChangeCause::kLeaseExpired, dead_letter);
        }
        break;
      }
      default: {
        if (m->in_graph()) {
          if (!every_shard_locked) return false;
          if (env_->dependencies->KeepOnRemoval(*this, m->id())) {
            // A waiting dependent still holds it: its timer is disarmed, its due time kept,
            // until the last holder stops waiting (RearmHeld). No effect: the due time, the
            // only part of it that is state, does not change.
            const TimerEntry& e = timers_.at(m->slot);
            held_.emplace(m->seq, Timing{e.due_at, e.token});
            timers_.Remove(m->slot);
            continue;
          }
          Emit(EffectType::kMessageRemoved, ChangeCause::kNone, m->state(), ref, now);
          Detach(ref);
          Erase(ref);
          break;
        }
        // Removals (retention) come in runs: detach a run of due ones, prefetching their
        // id-table groups, then erase them, so that the table's cache misses overlap.
        constexpr size_t kRun = 16;
        MessageRef run[kRun];
        size_t n = 0;
        while (n < kRun && !timers_.empty() && timers_.top().due_at <= now) {
          const MessageRef r = timers_.top().ref;
          const Message* due = At(r);
          if (!IsTerminal(due->state()) || due->in_graph()) break;
          Emit(EffectType::kMessageRemoved, ChangeCause::kNone, due->state(), r, now);
          Detach(r);
          ids_.Prefetch(IdTable::Hash(due->id()));
          run[n++] = r;
        }
        for (size_t i = 0; i < n; ++i) Erase(run[i]);
        *count += n - 1;  // and one below
        break;
      }
    }
    ++*count;
  }
  return true;
}

void Queue::RearmHeld(std::string_view id) {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return;
  Message* m = At(ref);
  if (!IsTerminal(m->state()) || m->slot != kNoSlot) return;
  const auto it = held_.find(m->seq);
  timers_.Push({it->second.due_at, it->second.token, ref});
  held_.erase(it);
}

// ---- Reads ------------------------------------------------------------------------------------

Result<MessageRecord> Queue::Get(std::string_view id) const {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  return Record(ref);
}

Result<MessageHistory> Queue::History(std::string_view id) const {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  EnqueuedBlockBuffer buffer;
  const std::string_view block = HistoryBlock(ref, At(ref), buffer);
  if (block.empty()) return MessageHistory{};
  return DecodeHistoryBlock(block);
}

Status Queue::Note(std::string_view id, uint64_t token, std::string_view text, TimeMs now) {
  if (settings_.history_max == 0) {
    return FailedPrecondition("queue: history is off (history_max 0)");
  }
  const MessageRef ref = FindLeased(id, token);
  if (ref == kNoRef) return NotFound("id: no such message");
  if (Status s = CheckLease(At(ref), token, now); !s.ok()) return s;
  Effect e = MessageEffect(EffectType::kMessageNoted, ref, now);
  e.lease_token = token;
  e.note = text;
  RecordHistory(ref, e);
  if (env_->sink != nullptr && !silenced_) env_->sink->OnEffect(e);
  return Status::Ok();
}

Result<BrowsePage> Queue::Browse(const BrowseRequest& request) const {
  int64_t after_priority = 0;
  uint64_t after_seq = 0;
  bool has_cursor = !request.cursor.empty();
  if (has_cursor && !DecodeCursor(request.cursor, &after_priority, &after_seq)) {
    return InvalidArgument("cursor: malformed");
  }
  // One pass keeping the `limit` first in priority order in a max-heap, each message compared
  // while the scan has it in cache (collecting every match and sorting after took 6x longer
  // on a 1M-message queue: every comparison missed the cache again).
  const size_t limit = request.limit;
  const auto before = [this](MessageRef x, MessageRef y) { return PriorityOrder(x, y); };
  std::vector<MessageRef> found;
  found.reserve(limit);
  size_t matches = 0;
  store_.ForEach([&](MessageRef ref, const Message* m) {
    if (m->state() != request.state) return;
    if (has_cursor &&
        (m->priority < after_priority || (m->priority == after_priority && m->seq <= after_seq))) {
      return;
    }
    if (!Matches(m, request.filter)) return;
    ++matches;
    if (found.size() < limit) {
      found.push_back(ref);
      std::push_heap(found.begin(), found.end(), before);
    } else if (limit > 0 && before(ref, found.front())) {
      std::pop_heap(found.begin(), found.end(), before);
      found.back() = ref;
      std::push_heap(found.begin(), found.end(), before);
    }
  });
  std::sort_heap(found.begin(), found.end(), before);
  const size_t take = found.size();
  BrowsePage page;
  page.messages.reserve(take);
  for (size_t i = 0; i < take; ++i) {
    MessageRecord r = Record(found[i]);
    page.messages.push_back({r.id, r.priority, r.state, r.attempts, r.version, r.visible_at,
                             r.lease_expires_at, r.enqueued_at, r.updated_at, r.expires_at});
  }
  if (matches > take && take > 0) page.next_cursor = EncodeCursor(At(found[take - 1]));
  return page;
}

StateCounts Queue::Count(const Filter& filter) const {
  if (filter.empty()) return counts_;
  StateCounts out;
  if (filter.size() == 1) {
    auto it = filters_.find(PairView{filter[0].key, filter[0].value});
    if (it == filters_.end()) return out;
    out.by_state = it->second.counts;
    if (gated()) {
      const FilterHeap& heap = it->second.pending;
      for (size_t i = 0; i < heap.size(); ++i) CountBlocked(At(heap.at(i).ref), &out);
    }
    return out;
  }
  store_.ForEach([&](MessageRef, const Message* m) {
    if (!Matches(m, filter)) return;
    ++out.by_state[StateIndex(m->state())];
    if (m->state() == MessageState::kPending) CountBlocked(m, &out);
  });
  return out;
}

Result<Explanation> Queue::Explain(std::string_view id) const {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return NotFound("id: no such message");
  const Message* m = At(ref);
  const Timing timing = TimingOf(m);
  Explanation x;
  x.id = std::string(m->id());
  x.state = m->state();
  x.attempts = m->attempts();
  switch (m->state()) {
    case MessageState::kInvisible:
      x.reason = ExplainReason::kInvisible;
      x.until = timing.due_at;
      break;
    case MessageState::kPending:
      if (settings_.dequeue_paused) {
        x.reason = ExplainReason::kQueuePaused;
      } else if (Blocked(m)) {
        ExplainHeld(m, &x);
      } else if (queue_refill_ms_ != 0) {  // a dequeue found the queue's bucket empty
        x.reason = ExplainReason::kQueueRate;
        x.until = queue_refill_ms_;
      } else if (const MessageRef turn =
                     gate_ != nullptr && gate_->fair() ? gate_->PeekFairHead() : kNoRef;
                 turn != kNoRef && gate_->ValueOf(At(turn)) != gate_->ValueOf(m)) {
        x.reason = ExplainReason::kFairShare;
        x.exclusivity_value = std::string(gate_->ValueOf(At(turn)));  // whose turn it is
      } else {
        x.reason = ExplainReason::kDequeueable;
      }
      break;
    case MessageState::kRunning:
      x.reason = ExplainReason::kRunning;
      x.lease_token = timing.token;
      x.until = timing.due_at;
      break;
    case MessageState::kErrored:
      x.reason = ExplainReason::kAttemptsSpent;
      break;
    case MessageState::kWaiting:
      x.reason = ExplainReason::kWaitingOnDependencies;
      break;
    default:
      x.reason = ExplainReason::kTerminal;
      break;
  }
  return x;
}

Explanation Queue::ExplainFilter(const Filter& filter) const {
  Explanation x;
  if (settings_.dequeue_paused) {
    x.reason = ExplainReason::kQueuePaused;
    return x;
  }
  if (const MessageRef ref = SelectPending(filter); ref != kNoRef) {
    if (queue_refill_ms_ != 0) return *Explain(At(ref)->id());  // held by the queue's rate
    const Message* m = At(ref);
    x.reason = ExplainReason::kDequeueable;
    x.id = std::string(m->id());
    x.state = m->state();
    x.attempts = m->attempts();
    return x;
  }
  MessageRef blocked = kNoRef;
  MessageRef invisible = kNoRef;
  TimeMs invisible_due = 0;
  store_.ForEach([&](MessageRef ref, const Message* m) {
    if (!Matches(m, filter)) return;
    if (m->state() == MessageState::kPending && Blocked(m)) {
      if (blocked == kNoRef || PriorityOrder(ref, blocked)) blocked = ref;
    } else if (m->state() == MessageState::kInvisible) {
      const TimeMs due = TimingOf(m).due_at;
      if (invisible == kNoRef || due < invisible_due ||
          (due == invisible_due && m->seq < At(invisible)->seq)) {
        invisible = ref;
        invisible_due = due;
      }
    }
  });
  if (blocked != kNoRef) return *Explain(At(blocked)->id());
  if (invisible != kNoRef) return *Explain(At(invisible)->id());
  x.reason = ExplainReason::kNoMatch;
  return x;
}

// ---- Replay, export, digest -------------------------------------------------------------------

Status Queue::ApplyEnqueued(const Effect& e) {
  const uint64_t hash = IdTable::Hash(e.id);
  if (ids_.Find(e.id, hash) != kNoRef) {
    return Status(Code::kInternal, "effect: the message already exists");
  }
  const int64_t pairs = StoredPairCount(e.packed_metadata);
  if (!e.history.empty() && e.history != kEnqueuedHistoryMark && !ValidHistoryBlock(e.history)) {
    return Status(Code::kInternal, "effect: malformed history");
  }
  if (pairs < 0 || e.id.empty() || e.id.size() > kMaxIdBytes || e.attempts > kMaxStoredAttempts ||
      e.max_attempts > kMaxStoredAttempts || static_cast<size_t>(e.to) >= kStateCount ||
      (e.to == MessageState::kPending && (e.due_at != 0 || e.lease_token != 0))) {
    return Status(Code::kInternal, "effect: malformed message");
  }
  if (e.expires_at < 0) return Status(Code::kInternal, "effect: malformed message");
  const MessageRef ref =
      Insert(e.id, hash, e.payload, e.packed_metadata, static_cast<uint32_t>(pairs), e.expires_at);
  Message* m = At(ref);
  m->priority = e.priority;
  m->seq = e.seq;
  next_seq_ = std::max(next_seq_, e.seq + 1);
  m->set_attempts(e.attempts);
  m->set_max_attempts(e.max_attempts);
  m->enqueued_at = e.enqueued_at;
  Stamp(ref, e.version, e.time);
  m->set_state(e.to);
  SetError(ref, e.error);
  if (e.to == MessageState::kCompleted) SetResult(ref, e.result);
  Attach(ref, Timing{e.due_at, e.lease_token});
  if (!e.restated) {
    RecordHistory(ref, e);
  } else {
    RestoreHistory(ref, e.history);
  }
  return Status::Ok();
}

Status Queue::ApplyChanged(const Effect& e) {
  MessageRef ref = Find(e.id);
  if (ref == kNoRef) return Status(Code::kInternal, "effect: no such message");
  if (e.attempts > kMaxStoredAttempts || e.max_attempts > kMaxStoredAttempts ||
      static_cast<size_t>(e.to) >= kStateCount ||
      (e.to == MessageState::kPending && (e.due_at != 0 || e.lease_token != 0))) {
    return Status(Code::kInternal, "effect: malformed message");
  }
  const bool replaces = e.cause == ChangeCause::kDebounced;
  if (replaces && StoredPairCount(e.packed_metadata) < 0) {
    return Status(Code::kInternal, "effect: malformed message");
  }
  const uint64_t ended_lease =
      At(ref)->state() == MessageState::kRunning ? TimingOf(At(ref)).token : 0;
  Detach(ref);
  if (replaces) ref = Rewrite(ref, e.payload, e.packed_metadata);
  Message* m = At(ref);
  m->set_state(e.to);
  m->priority = e.priority;
  m->set_attempts(e.attempts);
  m->set_max_attempts(e.max_attempts);
  Stamp(ref, e.version, e.time);
  SetError(ref, e.error);
  if (e.to == MessageState::kCompleted) SetResult(ref, e.result);
  Attach(ref, Timing{e.due_at, e.lease_token});
  // The token a live dequeue took, at the time it took it: replay rebuilds the buckets exactly.
  if (e.cause == ChangeCause::kLeased) {
    if (gate_ != nullptr) gate_->Granted(At(ref), e.time);
    QueueGranted(e.time);
  }
  RecordHistory(ref, e, ended_lease);
  return Status::Ok();
}

Status Queue::ApplyNoted(const Effect& e) {
  const MessageRef ref = Find(e.id);
  if (ref == kNoRef) return Status(Code::kInternal, "effect: no such message");
  Effect noted = MessageEffect(EffectType::kMessageNoted, ref, e.time);
  noted.lease_token = e.lease_token;
  noted.note = e.note;
  RecordHistory(ref, noted);
  return Status::Ok();
}

Status Queue::ApplyRemoved(const Effect& e) {
  const MessageRef ref = Find(e.id);
  if (ref == kNoRef) return Status(Code::kInternal, "effect: no such message");
  Detach(ref);
  Erase(ref);
  return Status::Ok();
}

Status Queue::ApplyDeadLettered(const Effect& e, Queue* dead_letter) {
  const MessageRef ref = Find(e.id);
  if (ref == kNoRef || dead_letter == nullptr || dead_letter == this ||
      dead_letter->Contains(e.id) || e.max_attempts > kMaxStoredAttempts) {
    return Status(Code::kInternal, "effect: dead-letter move does not apply");
  }
  MoveToDeadLetter(ref, dead_letter, e.seq, e.version, e.max_attempts, e.error, e.time,
                   /*emit=*/false);
  return Status::Ok();
}

void Queue::Export(EffectSink* visit) const {
  // In enqueue order, so that a reload lays records out (and builds heaps) in that order. The
  // sort is on (seq, ref) pairs gathered in one pass over the store: no record read per compare.
  std::vector<std::pair<uint64_t, MessageRef>> all;
  all.reserve(store_.size());
  store_.ForEach([&](MessageRef ref, const Message* m) { all.emplace_back(m->seq, ref); });
  std::sort(all.begin(), all.end());
  ExportKeyLimits(visit);  // before the messages
  for (const auto& [seq, ref] : all) {
    Effect e = MessageEffect(EffectType::kMessageEnqueued, ref, UpdatedAtOf(ref, At(ref)));
    e.restated = true;
    if (At(ref)->history_implicit()) {
      e.history = kEnqueuedHistoryMark;
    } else if (At(ref)->has_history()) {
      e.history = histories_.Block(ref);
    }
    visit->OnEffect(e);
  }
  ExportBuckets(visit);  // after the messages
}

void Queue::HashInto(void* xxh3_state) const {
  auto* st = static_cast<XXH3_state_t*>(xxh3_state);
  auto put = [st](const auto& v) { XXH3_64bits_update(st, &v, sizeof(v)); };
  auto put_str = [&](std::string_view s) {
    put(static_cast<uint64_t>(s.size()));
    XXH3_64bits_update(st, s.data(), s.size());
  };
  put_str(name_);
  const QueueSettings& s = settings_;
  put(static_cast<uint8_t>(s.type));
  put_str(s.exclusivity_key);
  put(s.lease_ms);
  put(s.invisibility_ms);
  put(s.max_attempts);
  put(s.retry_backoff_ms);
  put(s.retry_backoff_max_ms);
  put_str(s.dead_letter_queue);
  put(s.retention_ms);
  put(s.max_depth);
  put(static_cast<uint8_t>(s.enqueue_paused));
  put(static_cast<uint8_t>(s.dequeue_paused));
  if (s.history_max != kDefaultHistoryMax) put(s.history_max);  // keeps older digests
  if (!s.flow_key.empty() || s.key_concurrency != 0) {          // likewise
    put(uint8_t{26});
    put_str(s.flow_key);
    put(s.key_concurrency);
  }
  if (s.ttl_ms != 0 || s.dedupe != Dedupe::kKeep) {  // likewise
    put(s.ttl_ms);
    put(static_cast<uint8_t>(s.dedupe));
  }
  HashFlowInto(st);
  // Messages: the sum of one hash per message, so that no sort by id is needed (a digest of 1M
  // messages is checked on every snapshot load). The sum is independent of order and, with the
  // count, still changes when any field of any message does. Per message: XXH3 of the fixed
  // fields, then each string hashed with the previous hash as seed. The records are visited
  // in address order (a sequential read of the store).
  uint64_t sum = 0;
  store_.ForEach([&](MessageRef ref, const Message* m) {
    const Timing timing = TimingOf(m);
    const uint64_t fixed[9] = {m->seq,
                               static_cast<uint64_t>(m->priority),
                               static_cast<uint64_t>(m->state()),
                               (uint64_t{m->attempts()} << 32) | m->max_attempts(),
                               VersionOf(ref, m),
                               timing.token,
                               static_cast<uint64_t>(timing.due_at),
                               static_cast<uint64_t>(m->enqueued_at),
                               static_cast<uint64_t>(UpdatedAtOf(ref, m))};
    uint64_t h = XXH3_64bits(fixed, sizeof(fixed));
    for (std::string_view field : {m->id(), m->payload(), m->packed_metadata(), ErrorOf(m, ref)}) {
      h = XXH3_64bits_withSeed(field.data(), field.size(), h ^ field.size());
    }
    // Fields added after format version 1 are hashed only when present, so a state without
    // them keeps its version-1 digest (a version-1 snapshot's trailer still checks).
    if (const std::string_view result = ResultOf(m, ref); !result.empty()) {
      h = XXH3_64bits_withSeed(result.data(), result.size(), h ^ 0x5245535546ULL);
    }
    EnqueuedBlockBuffer buffer;
    if (const std::string_view history = HistoryBlock(ref, m, buffer); !history.empty()) {
      h = XXH3_64bits_withSeed(history.data(), history.size(), h ^ 0x48495354ULL);
    }
    if (m->has_expiry()) {
      const TimeMs expires_at = m->expires_at();
      h = XXH3_64bits_withSeed(&expires_at, sizeof expires_at, h ^ 0x455850ULL);
    }
    sum += h;
  });
  put(static_cast<uint64_t>(store_.size()));
  put(sum);
}

// ---- Bulk load --------------------------------------------------------------------------------

void Queue::BeginBulk() {
  bulk_ = true;
  ids_.set_bulk(true);
  ready_.BeginUnordered();
  timers_.BeginUnordered();
  expiry_.BeginUnordered();
  if (gate_ != nullptr) gate_->BeginBulk();
  for (auto& [pair, index] : filters_) index.pending.BeginUnordered();
}

void Queue::EndBulk() {
  if (!bulk_) return;
  bulk_ = false;
  ids_.set_bulk(false);
  timers_.Heapify();
  expiry_.Heapify();
  for (auto& [pair, index] : filters_) index.pending.Heapify();
  if (gate_ != nullptr) {
    gate_->EndBulk();  // the ready heads of the keys that are not held, and the blocked count
  } else {
    ready_.Heapify();
  }
}

// ---- Dependencies (engine/dependencies.h) -----------------------------------------------------

bool Queue::NeedsEveryShard(std::string_view id) const {
  if (graph_messages_ == 0) return false;
  const MessageRef ref = Find(id);
  return ref != kNoRef && At(ref)->in_graph();
}

std::vector<RemovedFromQueue> Queue::GraphMessages() const {
  std::vector<RemovedFromQueue> out;
  if (graph_messages_ == 0) return out;
  store_.ForEach([&](MessageRef, const Message* m) {
    if (m->in_graph()) out.push_back({std::string(m->id()), m->state()});
  });
  return out;
}

bool Queue::Restate(std::string_view id, Effect* out) const {
  const MessageRef ref = Find(id);
  if (ref == kNoRef) return false;
  *out = MessageEffect(EffectType::kMessageChanged, ref, UpdatedAtOf(ref, At(ref)));
  out->payload = {};
  out->packed_metadata = {};
  return true;
}

MessageState Queue::JoinGraph(std::string_view id) {
  Message* m = At(Find(id));
  if (!m->in_graph()) {
    m->set_in_graph();
    ++graph_messages_;
  }
  return m->state();
}

Result<EnqueueResult> Queue::EnqueueCallback(const EnqueueItem& item, TimeMs now, Random* rng,
                                             bool emit) {
  DerivedEmission derived(this, emit);
  forced_ = true;
  Result<EnqueueResult> r = Enqueue(item, now, rng, 0, 0, Status::Ok());
  forced_ = false;
  return r;
}

Result<EnqueueResult> Queue::EnqueueFlowNode(const EnqueueItem& item, TimeMs now, Random* rng) {
  forced_ = true;
  Result<EnqueueResult> r = Enqueue(item, now, rng, 0, 0, Status::Ok());
  forced_ = false;
  return r;
}

Status Queue::ReleaseWaiting(std::string_view id, TimeMs now, bool emit) {
  const MessageRef ref = Find(id);
  if (ref == kNoRef || At(ref)->state() != MessageState::kWaiting) {
    return Status(Code::kInternal, "dependencies: no such waiting message");
  }
  Timing old;
  const MessageState from = BeginChange(ref, &old);
  const bool invisible = static_cast<TimeMs>(old.token) > now;
  const Timing timing = invisible ? Timing{static_cast<TimeMs>(old.token), 0} : Timing{};
  DerivedEmission derived(this, emit);
  FinishChange(ref, from, invisible ? MessageState::kInvisible : MessageState::kPending, now,
               ChangeCause::kReleased, timing);
  return Status::Ok();
}

Status Queue::FailWaiting(std::string_view id, MessageState to, std::string_view reason, TimeMs now,
                          bool emit) {
  const MessageRef ref = Find(id);
  if (ref == kNoRef || At(ref)->state() != MessageState::kWaiting) {
    return Status(Code::kInternal, "dependencies: no such waiting message");
  }
  SetError(ref, reason);
  const MessageState from = BeginChange(ref);
  DerivedEmission derived(this, emit);
  FinishChange(ref, from, to, now, ChangeCause::kDependencyFailed,
               Timing{SaturatingAdd(now, settings_.retention_ms), 0});
  return Status::Ok();
}

}  // namespace sundial
