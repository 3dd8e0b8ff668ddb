// Names of enums as they appear in the protocol, the CLI and docs (snake_case, as
// docs/protocol.md writes them).
#include "engine/effect.h"
#include "engine/types.h"

namespace sundial {

std::string_view StateName(MessageState s) {
  switch (s) {
    case MessageState::kInvisible:
      return "invisible";
    case MessageState::kPending:
      return "pending";
    case MessageState::kRunning:
      return "running";
    case MessageState::kCompleted:
      return "completed";
    case MessageState::kCanceled:
      return "canceled";
    case MessageState::kErrored:
      return "errored";
    case MessageState::kWaiting:
      return "waiting";
  }
  return "unknown";
}

std::optional<MessageState> ParseState(std::string_view name) {
  for (size_t i = 0; i < kStateCount; ++i) {
    auto s = static_cast<MessageState>(i);
    if (StateName(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view QueueTypeName(QueueType t) {
  return t == QueueType::kExclusive ? "exclusive" : "simple";
}

std::string_view DedupeName(Dedupe d) {
  return d == Dedupe::kWhileActive ? "while_active" : "keep";
}

std::string_view FairnessName(Fairness f) { return f == Fairness::kWeighted ? "weighted" : "none"; }

std::string_view ExplainReasonName(ExplainReason r) {
  switch (r) {
    case ExplainReason::kDequeueable:
      return "dequeueable";
    case ExplainReason::kInvisible:
      return "invisible";
    case ExplainReason::kExclusivityHeld:
      return "exclusivity_held";
    case ExplainReason::kQueuePaused:
      return "queue_paused";
    case ExplainReason::kNoMatch:
      return "no_match";
    case ExplainReason::kAttemptsSpent:
      return "attempts_spent";
    case ExplainReason::kRunning:
      return "running";
    case ExplainReason::kTerminal:
      return "terminal";
    case ExplainReason::kWaitingOnDependencies:
      return "waiting_on_dependencies";
    case ExplainReason::kKeyConcurrency:
      return "key_concurrency";
    case ExplainReason::kKeyRate:
      return "key_rate";
    case ExplainReason::kQueueRate:
      return "queue_rate";
    case ExplainReason::kFairShare:
      return "fair_share";
  }
  return "unknown";
}

std::string_view EffectTypeName(EffectType type) {
  switch (type) {
    case EffectType::kQueueCreated:
      return "queue_created";
    case EffectType::kQueueUpdated:
      return "queue_updated";
    case EffectType::kQueueDeleted:
      return "queue_deleted";
    case EffectType::kQueuePurged:
      return "queue_purged";
    case EffectType::kMessageEnqueued:
      return "message_enqueued";
    case EffectType::kMessageChanged:
      return "message_changed";
    case EffectType::kMessageRemoved:
      return "message_removed";
    case EffectType::kMessageNoted:
      return "message_noted";
    case EffectType::kMessageDeadLettered:
      return "message_dead_lettered";
    case EffectType::kEpochStarted:
      return "epoch_started";
    case EffectType::kScheduleUpserted:
      return "schedule_upserted";
    case EffectType::kScheduleDeleted:
      return "schedule_deleted";
    case EffectType::kSchedulePaused:
      return "schedule_paused";
    case EffectType::kScheduleResumed:
      return "schedule_resumed";
    case EffectType::kScheduleFired:
      return "schedule_fired";
    case EffectType::kBatchCreated:
      return "batch_created";
    case EffectType::kBatchSealed:
      return "batch_sealed";
    case EffectType::kBatchRemoved:
      return "batch_removed";
    case EffectType::kFlowEnqueued:
      return "flow_enqueued";
    case EffectType::kKeyStateRestated:
      return "key_state_restated";
    case EffectType::kQueueReady:
      return "queue_ready";
    case EffectType::kKeyLimitsSet:
      return "key_limits_set";
  }
  return "unknown";
}

std::string_view ChangeCauseName(ChangeCause cause) {
  switch (cause) {
    case ChangeCause::kNone:
      return "none";
    case ChangeCause::kLeased:
      return "leased";
    case ChangeCause::kCompleted:
      return "completed";
    case ChangeCause::kFailed:
      return "failed";
    case ChangeCause::kExtended:
      return "extended";
    case ChangeCause::kCanceled:
      return "canceled";
    case ChangeCause::kReprioritized:
      return "reprioritized";
    case ChangeCause::kRedriven:
      return "redriven";
    case ChangeCause::kBecameVisible:
      return "became_visible";
    case ChangeCause::kLeaseExpired:
      return "lease_expired";
    case ChangeCause::kReleased:
      return "released";
    case ChangeCause::kDependencyFailed:
      return "dependency_failed";
    case ChangeCause::kExpired:
      return "expired";
    case ChangeCause::kDebounced:
      return "debounced";
  }
  return "unknown";
}

std::string_view HistoryEventName(HistoryEvent e) {
  switch (e) {
    case HistoryEvent::kEnqueued:
      return "enqueued";
    case HistoryEvent::kDeadLettered:
      return "dead_lettered";
    case HistoryEvent::kNoted:
      return "noted";
    default:
      return ChangeCauseName(static_cast<ChangeCause>(e));
  }
}

HistoryActor HistoryActorOf(HistoryEvent e) {
  switch (e) {
    case HistoryEvent::kLeased:
    case HistoryEvent::kCompleted:
    case HistoryEvent::kFailed:
    case HistoryEvent::kExtended:
    case HistoryEvent::kNoted:
      return HistoryActor::kWorker;
    case HistoryEvent::kBecameVisible:
    case HistoryEvent::kLeaseExpired:
    case HistoryEvent::kExpired:
      return HistoryActor::kTimer;
    case HistoryEvent::kReleased:
    case HistoryEvent::kDependencyFailed:
      return HistoryActor::kDependency;
    case HistoryEvent::kDeadLettered:
      return HistoryActor::kEngine;
    default:
      return HistoryActor::kRequest;
  }
}

std::string_view HistoryActorName(HistoryActor a) {
  switch (a) {
    case HistoryActor::kRequest:
      return "request";
    case HistoryActor::kWorker:
      return "worker";
    case HistoryActor::kTimer:
      return "timer";
    case HistoryActor::kDependency:
      return "dependency";
    case HistoryActor::kEngine:
      return "engine";
  }
  return "unknown";
}

std::string_view MisfirePolicyName(MisfirePolicy p) {
  switch (p) {
    case MisfirePolicy::kSkip:
      return "skip";
    case MisfirePolicy::kOne:
      return "one";
    case MisfirePolicy::kAll:
      return "all";
  }
  return "unknown";
}

std::optional<MisfirePolicy> ParseMisfirePolicy(std::string_view name) {
  for (auto p : {MisfirePolicy::kSkip, MisfirePolicy::kOne, MisfirePolicy::kAll}) {
    if (MisfirePolicyName(p) == name) return p;
  }
  return std::nullopt;
}

std::string_view OverlapPolicyName(OverlapPolicy p) {
  switch (p) {
    case OverlapPolicy::kAllow:
      return "allow";
    case OverlapPolicy::kSkipIfActive:
      return "skip_if_active";
  }
  return "unknown";
}

std::optional<OverlapPolicy> ParseOverlapPolicy(std::string_view name) {
  for (auto p : {OverlapPolicy::kAllow, OverlapPolicy::kSkipIfActive}) {
    if (OverlapPolicyName(p) == name) return p;
  }
  return std::nullopt;
}

}  // namespace sundial
