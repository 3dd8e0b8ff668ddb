// Queue's expiry, debounce and id release (docs/semantics.md, "Flow control": "Expiry",
// "Releasing ids: dedupe while_active", "Debounce"; docs/engine.md, "Expiry"): the members of
// Queue (queue.h) that only these rules use, apart from queue.cc so that the key gate's rewrite
// of queue.cc (docs/design/flow-control.md, §1) and this merge apart. The hooks they need stay in
// queue.cc: Attach and Detach keep expiry_ (engine/expiry.h), Enqueue calls Debounce and
// releases an id, Dequeue and Advance call ExpireDue, ApplyChanged calls Rewrite.
#include <algorithm>
#include <string>

#include "engine/metadata.h"
#include "engine/queue.h"

namespace sundial {

bool Queue::Releases(const EnqueueItem& item) const {
  return !item.id.empty() && Releases(item, Find(item.id));
}

bool Queue::Releases(const EnqueueItem& item, MessageRef ref) const {
  if (settings_.dedupe != Dedupe::kWhileActive) return false;
  if (ref == kNoRef || !IsTerminal(At(ref)->state()) || At(ref)->in_graph()) return false;
  for (const std::string& key : item.depends_on) {
    if (key.size() == name_.size() + 1 + item.id.size() && key.starts_with(name_) &&
        key[name_.size()] == '/' && key.ends_with(item.id)) {
      return false;
    }
  }
  return true;
}

void Queue::Expire(MessageRef ref, TimeMs now) {
  SetError(ref, "expired");
  MakeTerminal(ref, MessageState::kCanceled, now, ChangeCause::kExpired);
}

bool Queue::ExpireDue(TimeMs now, bool every_shard_locked, uint64_t* count) {
  while (expiry_.next() <= now) {
    const MessageRef ref = expiry_.top_ref();
    if (At(ref)->in_graph() && !every_shard_locked) return false;
    Expire(ref, now);
    if (count != nullptr) ++*count;
  }
  return true;
}

MessageRef Queue::Rewrite(MessageRef ref, std::string_view payload,
                          std::string_view packed_metadata) {
  const Message* old = At(ref);
  const std::string id(old->id());
  const uint64_t version = VersionOf(ref, old);
  const TimeMs updated_at = UpdatedAtOf(ref, old);
  const std::string error(ErrorOf(old, ref));
  EnqueuedBlockBuffer buffer;
  const std::string history(HistoryBlock(ref, old, buffer));
  const bool in_graph = old->in_graph();
  const Message fixed = *old;
  const TimeMs expires_at = old->expires_at();
  Erase(ref);
  const MessageRef n = Insert(id, IdTable::Hash(id), payload, packed_metadata,
                              PackedPairCount(packed_metadata), expires_at);
  Message* m = At(n);
  m->priority = fixed.priority;
  m->seq = fixed.seq;
  m->enqueued_at = fixed.enqueued_at;
  m->set_attempts(fixed.attempts());
  m->set_max_attempts(fixed.max_attempts());
  m->set_state(fixed.state());
  Stamp(n, version, updated_at);
  SetError(n, error);
  if (in_graph) {
    m->set_in_graph();
    ++graph_messages_;
  }
  RestoreHistory(n, history);
  return n;
}

Result<EnqueueResult> Queue::Debounce(MessageRef ref, const EnqueueItem& item, TimeMs now,
                                      uint64_t memory_budget, uint64_t memory_used,
                                      const Status& budget_exhausted) {
  thread_local std::string packed;
  packed.clear();
  AppendPackedMetadata(item.metadata, &packed);
  const Message* m = At(ref);
  const uint64_t grows = item.payload.size() + packed.size();
  const uint64_t shrinks = m->payload().size() + m->packed_metadata().size();
  if (memory_budget > 0 && grows > shrinks && memory_used + (grows - shrinks) > memory_budget) {
    return budget_exhausted;
  }
  Timing old;
  const MessageState from = BeginChange(ref, &old);
  const TimeMs current = from == MessageState::kInvisible ? old.due_at : now;
  const TimeMs visible_at = std::max(current, SaturatingAdd(now, *item.debounce_ms));
  const MessageRef n = Rewrite(ref, item.payload, packed);
  const bool invisible = visible_at > now;
  FinishChange(n, from, invisible ? MessageState::kInvisible : MessageState::kPending, now,
               ChangeCause::kDebounced, invisible ? Timing{visible_at, 0} : Timing{});
  return EnqueueResult{std::string(At(n)->id()), VersionOf(n, At(n)), false};
}

}  // namespace sundial
