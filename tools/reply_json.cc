#include "tools/reply_json.h"

#include <boost/json/array.hpp>
#include <cmath>
#include <optional>
#include <string>

#include "engine/validation.h"
#include "tools/record_json.h"

namespace sundial::tools {
namespace {

namespace json = boost::json;
namespace p = protocol;

std::string_view View(const flatbuffers::String* s) {
  return s ? s->string_view() : std::string_view();
}

// A rate has at most 3 decimals: a whole one prints as an integer (100, not 1E2).
json::value RateJson(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

// Writes `s` as key, or as key_base64 when it is not valid UTF-8.
void PutText(json::object* out, std::string_view key, std::string_view s) {
  if (IsValidUtf8(s)) {
    (*out)[key] = s;
  } else {
    (*out)[std::string(key) + "_base64"] = Base64Encode(s);
  }
}

void PutText(json::object* out, std::string_view key, const flatbuffers::String* s) {
  PutText(out, key, View(s));
}

void PutMetadata(json::object* out,
                 const flatbuffers::Vector<flatbuffers::Offset<p::MetadataPair>>* pairs) {
  json::object text;
  bool all_text = true;
  if (pairs != nullptr) {
    for (const p::MetadataPair* pair : *pairs) {
      const std::string_view key = View(pair->key());
      const std::string_view value = View(pair->value());
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) all_text = false;
      text[key] = value;
    }
  }
  if (all_text) {
    (*out)["metadata"] = std::move(text);
    return;
  }
  json::array raw;
  for (const p::MetadataPair* pair : *pairs) {
    raw.push_back(json::array{json::value(Base64Encode(View(pair->key()))),
                              json::value(Base64Encode(View(pair->value())))});
  }
  (*out)["metadata_base64"] = std::move(raw);
}

std::string_view StateName(p::MessageState state) { return p::EnumNameMessageState(state); }

std::string_view Bytes(const flatbuffers::Vector<uint8_t>* v) {
  return v ? std::string_view(reinterpret_cast<const char*>(v->data()), v->size())
           : std::string_view();
}

std::string Explanation(const p::ExplainResult& x) {
  const std::string until = std::to_string(x.until());
  switch (x.reason()) {
    case p::ExplainReason::dequeueable:
      return "a dequeue would return it now";
    case p::ExplainReason::invisible:
      return "invisible until " + until;
    case p::ExplainReason::exclusivity_held:
      return "exclusivity value '" + std::string(View(x.exclusivity_value())) +
             "' is held by lease " + std::to_string(x.lease_token()) + " until " + until;
    case p::ExplainReason::queue_paused:
      return "the queue's dequeue is paused";
    case p::ExplainReason::no_match:
      return "no pending message matches the filter";
    case p::ExplainReason::attempts_spent:
      return "errored after " + std::to_string(x.attempts()) + " attempts";
    case p::ExplainReason::running:
      return "running: leased by " + std::to_string(x.lease_token()) + " until " + until;
    case p::ExplainReason::terminal:
      return "terminal: " + std::string(StateName(x.state()));
    case p::ExplainReason::waiting_on_dependencies: {
      // "waiting on 2 of 3: emails/a, emails/b"
      std::string text = "waiting on " + std::to_string(x.unfinished()) + " of " +
                         std::to_string(x.dependencies()) + " dependencies";
      if (x.waiting_on() != nullptr && x.waiting_on()->size() > 0) {
        text += ": ";
        for (flatbuffers::uoffset_t i = 0; i < x.waiting_on()->size(); ++i) {
          if (i > 0) text += ", ";
          text += x.waiting_on()->Get(i)->string_view();
        }
        if (x.unfinished() > x.waiting_on()->size()) text += ", …";
      }
      return text;
    }
    case p::ExplainReason::key_concurrency:
      // "key acme 5/5 running; the first lease (7) ends at T" (SPEC §9's wording)
      return "key " + std::string(View(x.exclusivity_value())) + " " +
             std::to_string(x.key_running()) + "/" + std::to_string(x.key_concurrency()) +
             " running; the first lease (" + std::to_string(x.lease_token()) + ") ends at " + until;
    case p::ExplainReason::key_rate:
      return "key " + std::string(View(x.exclusivity_value())) +
             " has no token (key_rate_per_s); next token at " + until;
    case p::ExplainReason::queue_rate:
      return "the queue has no token (rate_per_s); next token at " + until;
    case p::ExplainReason::fair_share:
      return "fair share: key " + std::string(View(x.exclusivity_value())) + " has its turn";
  }
  return "unknown reason";
}

}  // namespace

json::object QueueToJson(const p::QueueInfo& queue) {
  json::object o;
  PutText(&o, "name", queue.name());
  const p::QueueSettings* s = queue.settings();
  if (s != nullptr) {
    // The server sends every setting of a queue it describes; one it left out is not printed.
    const auto put = [&o](const char* name, auto value) {
      if (value) o[name] = *value;
    };
    if (s->type()) o["type"] = p::EnumNameQueueType(*s->type());
    PutText(&o, "exclusivity_key", s->exclusivity_key());
    put("lease_ms", s->lease_ms());
    put("invisibility_ms", s->invisibility_ms());
    put("max_attempts", s->max_attempts());
    put("retry_backoff_ms", s->retry_backoff_ms());
    put("retry_backoff_max_ms", s->retry_backoff_max_ms());
    PutText(&o, "dead_letter_queue", s->dead_letter_queue());
    put("retention_ms", s->retention_ms());
    put("max_depth", s->max_depth());
    put("enqueue_paused", s->enqueue_paused());
    put("dequeue_paused", s->dequeue_paused());
    put("history_max", s->history_max());
    PutText(&o, "flow_key", s->flow_key());
    put("key_concurrency", s->key_concurrency());
    put("ttl_ms", s->ttl_ms());
    if (s->dedupe()) o["dedupe"] = p::EnumNameDedupe(*s->dedupe());
    const auto put_rate = [&o](const char* name, std::optional<double> value) {
      if (value) o[name] = RateJson(*value);
    };
    put_rate("rate_per_s", s->rate_per_s());
    put("burst", s->burst());
    put_rate("key_rate_per_s", s->key_rate_per_s());
    put("key_burst", s->key_burst());
    if (s->fairness()) o["fairness"] = p::EnumNameFairness(*s->fairness());
    put("overdue_first_ms", s->overdue_first_ms());
  }
  o["counts"] = CountsToJson(queue.counts());
  o["oldest_pending_age_ms"] = queue.oldest_pending_age_ms();
  o["memory_bytes"] = queue.memory_bytes();
  return o;
}

json::object CountsToJson(const p::StateCounts* c) {
  json::object o;
  o["invisible"] = c ? c->invisible() : 0;
  o["pending"] = c ? c->pending() : 0;
  o["running"] = c ? c->running() : 0;
  o["completed"] = c ? c->completed() : 0;
  o["canceled"] = c ? c->canceled() : 0;
  o["errored"] = c ? c->errored() : 0;
  o["blocked"] = c ? c->blocked() : 0;
  o["waiting"] = c ? c->waiting() : 0;
  return o;
}

json::object MessageToJson(const p::Message& m) {
  json::object o;
  PutText(&o, "queue", m.queue());
  PutText(&o, "id", m.id());
  o["priority"] = m.priority();
  o["state"] = StateName(m.state());
  o["attempts"] = m.attempts();
  o["max_attempts"] = m.max_attempts();
  o["visible_at"] = m.visible_at();
  o["lease_token"] = m.lease_token();
  o["lease_expires_at"] = m.lease_expires_at();
  o["version"] = m.version();
  o["enqueued_at"] = m.enqueued_at();
  o["updated_at"] = m.updated_at();
  PutText(&o, "last_error", m.last_error());
  if (m.expires_at() != 0) o["expires_at"] = m.expires_at();  // a ttl (semantics.md, "Expiry")
  PutMetadata(&o, m.metadata());
  PutText(&o, "payload", Bytes(m.payload()));
  PutText(&o, "result", Bytes(m.result()));
  if (m.dependency_results() != nullptr) {
    json::array dependencies;
    for (const p::WaitItem* d : *m.dependency_results()) {
      dependencies.push_back(WaitItemToJson(*d));
    }
    o["dependency_results"] = std::move(dependencies);
  }
  return o;
}

json::object ScheduleToJson(const p::Schedule& s) {
  json::object o;
  PutText(&o, "queue", s.queue());
  PutText(&o, "name", s.name());
  PutText(&o, "cron", s.cron());
  PutText(&o, "tz", s.tz());
  o["every_ms"] = s.every_ms();
  PutText(&o, "payload", Bytes(s.payload()));
  PutMetadata(&o, s.metadata());
  o["priority_offset_ms"] = s.priority_offset_ms();
  o["max_attempts"] = s.max_attempts();
  o["misfire"] = p::EnumNameMisfirePolicy(s.misfire());
  o["overlap"] = p::EnumNameOverlapPolicy(s.overlap());
  o["paused"] = s.paused();
  o["next_fire_at"] = s.next_fire_at();
  o["last_fire_at"] = s.last_fire_at();
  o["last_enqueued_at"] = s.last_enqueued_at();
  o["fires"] = s.fires();
  o["overlap_skips"] = s.overlap_skips();
  o["missed"] = s.missed();
  o["failed"] = s.failed();
  PutText(&o, "last_error", s.last_error());
  o["created_at"] = s.created_at();
  o["updated_at"] = s.updated_at();
  return o;
}

json::object FlowNodeToJson(const p::FlowNodeResult& n) {
  json::object o;
  PutText(&o, "queue", n.queue());
  PutText(&o, "id", n.id());
  o["version"] = n.version();
  o["duplicate"] = n.duplicate();
  return o;
}

json::object BatchToJson(const p::BatchInfo& b) {
  json::object o;
  PutText(&o, "id", b.id());
  o["sealed"] = b.sealed();
  o["done"] = b.done();
  o["done_at"] = b.done_at();
  o["created_at"] = b.created_at();
  o["retention_ms"] = b.retention_ms();
  o["members"] = b.members();
  o["active"] = b.active();
  o["completed"] = b.completed();
  o["canceled"] = b.canceled();
  o["errored"] = b.errored();
  if (const p::BatchCallback* c = b.callback()) {
    json::object cb;
    PutText(&cb, "queue", c->queue());
    PutText(&cb, "id", c->id());
    cb["priority"] = c->priority();
    PutText(&cb, "payload", Bytes(c->payload()));
    PutMetadata(&cb, c->metadata());
    if (c->max_attempts()) {
      cb["max_attempts"] = *c->max_attempts();
    } else {
      cb["max_attempts"] = nullptr;
    }
    o["callback"] = std::move(cb);
  } else {
    o["callback"] = nullptr;
  }
  return o;
}

json::object KeyInfoToJson(const p::KeyInfo& k) {
  json::object o;
  PutText(&o, "value", k.value());
  json::object overrides;
  if (const p::KeyLimits* l = k.overrides()) {
    if (l->concurrency()) overrides["concurrency"] = *l->concurrency();
    if (l->rate_per_s()) overrides["rate_per_s"] = RateJson(*l->rate_per_s());
    if (l->burst()) overrides["burst"] = *l->burst();
    if (l->weight()) overrides["weight"] = *l->weight();
  }
  o["overrides"] = std::move(overrides);
  o["concurrency"] = k.concurrency();
  o["rate_per_s"] = RateJson(k.rate_per_s());
  o["burst"] = k.burst();
  o["weight"] = k.weight();
  o["pending"] = k.pending();
  o["running"] = k.running();
  o["held"] = k.held();
  o["next_token"] = k.next_token();
  return o;
}

json::object HistoryToJson(const p::HistoryResult& h) {
  json::object o;
  json::array entries;
  if (h.entries() != nullptr) {
    for (const p::HistoryEntry* e : *h.entries()) {
      json::object x;
      x["time"] = e->time();
      PutText(&x, "event", e->event());
      x["from"] = StateName(e->from());
      x["to"] = StateName(e->to());
      x["attempt"] = e->attempt();
      x["lease_token"] = e->lease_token();
      PutText(&x, "actor", e->actor());
      if (e->worker_id() != nullptr) PutText(&x, "worker_id", e->worker_id());
      if (e->text() != nullptr) PutText(&x, "text", e->text());
      entries.emplace_back(std::move(x));
    }
  }
  o["entries"] = std::move(entries);
  o["dropped"] = h.dropped();
  return o;
}

json::object WaitItemToJson(const p::WaitItem& item) {
  json::object o;
  PutText(&o, "id", item.id());
  if (const p::Error* error = item.error()) {
    o["code"] = CodeName(static_cast<Code>(error->code()));
    PutText(&o, "message", error->message());
    return o;
  }
  o["state"] = StateName(item.state());
  PutText(&o, "result", Bytes(item.result()));
  PutText(&o, "last_error", item.last_error());
  return o;
}

json::object SummaryToJson(const p::MessageSummary& m) {
  json::object o;
  PutText(&o, "id", m.id());
  o["priority"] = m.priority();
  o["state"] = StateName(m.state());
  o["attempts"] = m.attempts();
  o["version"] = m.version();
  o["visible_at"] = m.visible_at();
  o["lease_expires_at"] = m.lease_expires_at();
  o["enqueued_at"] = m.enqueued_at();
  o["updated_at"] = m.updated_at();
  if (m.expires_at() != 0) o["expires_at"] = m.expires_at();
  return o;
}

json::object ExplainToJson(const p::ExplainResult& x) {
  json::object o;
  o["reason"] = p::EnumNameExplainReason(x.reason());
  PutText(&o, "id", x.id());
  o["state"] = StateName(x.state());
  o["until"] = x.until();
  o["lease_token"] = x.lease_token();
  PutText(&o, "exclusivity_value", x.exclusivity_value());
  o["attempts"] = x.attempts();
  if (x.reason() == p::ExplainReason::exclusivity_held ||
      x.reason() == p::ExplainReason::key_concurrency) {
    o["key_running"] = x.key_running();
    o["key_concurrency"] = x.key_concurrency();
  }
  if (x.reason() == p::ExplainReason::waiting_on_dependencies) {
    o["dependencies"] = x.dependencies();
    o["unfinished"] = x.unfinished();
    json::array keys;
    if (x.waiting_on() != nullptr) {
      for (const auto* key : *x.waiting_on()) keys.emplace_back(json::string(key->string_view()));
    }
    o["waiting_on"] = std::move(keys);
  }
  if (x.waiting_dependents() > 0) {  // the dependents still waiting on it (explain by id)
    json::array keys;
    if (x.dependents() != nullptr) {
      for (const auto* key : *x.dependents()) keys.emplace_back(json::string(key->string_view()));
    }
    o["dependents"] = std::move(keys);
    o["waiting_dependents"] = x.waiting_dependents();
  }
  o["explanation"] = Explanation(x);
  return o;
}

json::object StatsToJson(const p::StatsResult& s) {
  json::object o;
  o["uptime_ms"] = s.uptime_ms();
  o["queues"] = s.queues();
  o["messages"] = CountsToJson(s.messages());
  o["memory_bytes"] = s.memory_bytes();
  o["memory_budget_bytes"] = s.memory_budget_bytes();
  o["connections"] = s.connections();
  o["wal_next_lsn"] = s.wal_next_lsn();
  o["wal_durable_lsn"] = s.wal_durable_lsn();
  o["wal_fsyncs"] = s.wal_fsyncs();
  o["wal_fsync_mean_us"] = s.wal_fsync_mean_us();
  o["wal_bytes"] = s.wal_bytes();
  o["wal_failed"] = s.wal_failed();
  return o;
}

json::object HealthToJson(const p::HealthResult& h) {
  json::object o;
  o["live"] = h.live();
  o["ready"] = h.ready();
  PutText(&o, "reason", h.reason());
  return o;
}

json::object ClusterToJson(const p::ClusterResult& c) {
  json::object o;
  PutText(&o, "cluster", c.cluster());
  PutText(&o, "node", c.node());
  o["epoch"] = c.epoch();
  PutText(&o, "primary", c.primary());
  PutText(&o, "primary_addr", c.primary_addr());
  PutText(&o, "sync_standby", c.sync_standby());
  PutText(&o, "replication", c.replication());
  json::array members;
  if (c.members() != nullptr) {
    for (const p::ClusterMember* m : *c.members()) {
      json::object member;
      PutText(&member, "node", m->node());
      member["role"] = p::EnumNameNodeRole(m->role());
      PutText(&member, "addr", m->addr());
      PutText(&member, "http_addr", m->http_addr());
      PutText(&member, "replication_addr", m->replication_addr());
      member["epoch"] = m->epoch();
      member["end_lsn"] = m->end_lsn();
      member["flushed_lsn"] = m->flushed_lsn();
      member["lag_records"] = m->lag_records();
      member["lag_ms"] = m->lag_ms();
      member["sync"] = m->sync();
      members.push_back(std::move(member));
    }
  }
  o["members"] = std::move(members);
  return o;
}

json::object EventToJson(const p::EventMessage& event) {
  json::object o;
  if (const p::MessageEvent* m = event.event_as_MessageEvent()) {
    o["event"] = "message";
    PutText(&o, "queue", m->queue());
    PutText(&o, "id", m->id());
    o["from"] = StateName(m->from());
    o["to"] = StateName(m->to());
    o["version"] = m->version();
    o["time"] = m->time();
    PutText(&o, "cause", m->cause());
  } else if (const p::StatsTick* tick = event.event_as_StatsTick()) {
    o["event"] = "stats";
    if (tick->stats() != nullptr) {
      for (auto& [key, value] : StatsToJson(*tick->stats())) o[key] = value;
    }
  } else if (const p::SubscriptionClosed* closed = event.event_as_SubscriptionClosed()) {
    o["event"] = "closed";
    PutText(&o, "reason", closed->reason());
  } else {
    o["event"] = "unknown";
  }
  return o;
}

json::object ErrorToJson(const client::Error& error) {
  json::object o;
  o["code"] = CodeName(error.code);
  PutText(&o, "message", error.message);
  if (!error.primary.empty()) PutText(&o, "primary", error.primary);
  return o;
}

}  // namespace sundial::tools
