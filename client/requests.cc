#include "client/requests.h"

#include <chrono>
#include <random>

namespace sundial::client {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

using PairVector = fb::Vector<fb::Offset<p::MetadataPair>>;

// Pairs, or no vector at all when there are none (an absent filter).
fb::Offset<PairVector> PairsOf(fb::FlatBufferBuilder& b, const Pairs& pairs) {
  if (pairs.empty()) return 0;
  std::vector<fb::Offset<p::MetadataPair>> out;
  out.reserve(pairs.size());
  for (const auto& [key, value] : pairs) {
    out.push_back(p::CreateMetadataPair(b, b.CreateString(key), b.CreateString(value)));
  }
  return b.CreateVector(out);
}

fb::Offset<fb::Vector<fb::Offset<fb::String>>> StringsOf(fb::FlatBufferBuilder& b,
                                                         const std::vector<std::string>& strings) {
  std::vector<fb::Offset<fb::String>> out;
  out.reserve(strings.size());
  for (const std::string& s : strings) out.push_back(b.CreateString(s));
  return b.CreateVector(out);
}

fb::Offset<fb::String> StringOf(fb::FlatBufferBuilder& b, std::string_view s) {
  return b.CreateString(s.data(), s.size());
}

template <typename T>
std::string Finish(fb::FlatBufferBuilder& b, RequestHeader h, p::Operation type, fb::Offset<T> op) {
  b.Finish(p::CreateRequest(b, h.request_id, h.durability, type, op.Union()),
           p::RequestIdentifier());
  return FinishedBytes(b);
}

}  // namespace

std::string NewMessageId() {
  static constexpr char kCrockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  thread_local std::mt19937_64 rng([] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }());
  const auto ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
  unsigned __int128 v = static_cast<unsigned __int128>(ms & 0xFFFFFFFFFFFFull) << 80;
  v |= static_cast<unsigned __int128>(rng() & 0xFFFF) << 64;
  v |= rng();
  std::string out(26, '0');
  for (int i = 25; i >= 0; --i) {
    out[i] = kCrockford[static_cast<unsigned>(v & 31)];
    v >>= 5;
  }
  return out;
}

std::string FinishedBytes(const flatbuffers::FlatBufferBuilder& b) {
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

std::string BuildAuth(RequestHeader h, std::string_view token) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::Auth, p::CreateAuth(b, StringOf(b, token)));
}

std::string BuildCreateQueue(RequestHeader h, std::string_view name, const QueueSettings& s) {
  fb::FlatBufferBuilder b;
  auto key = s.exclusivity_key.empty() ? 0 : b.CreateString(s.exclusivity_key);
  auto dlq = s.dead_letter_queue.empty() ? 0 : b.CreateString(s.dead_letter_queue);
  auto flow_key = s.flow_key.empty() ? 0 : b.CreateString(s.flow_key);
  auto settings = p::CreateQueueSettings(
      b, s.type, key, s.lease_ms, s.invisibility_ms, s.max_attempts, s.retry_backoff_ms,
      s.retry_backoff_max_ms, dlq, s.retention_ms, s.max_depth, s.enqueue_paused, s.dequeue_paused,
      s.history_max, flow_key, s.key_concurrency, s.ttl_ms, s.dedupe, s.rate_per_s, s.burst,
      s.key_rate_per_s, s.key_burst, s.fairness, s.overdue_first_ms);
  return Finish(b, h, p::Operation::CreateQueue,
                p::CreateCreateQueue(b, StringOf(b, name), settings));
}

std::string BuildUpdateQueue(RequestHeader h, std::string_view name, const QueueSettingsUpdate& u) {
  fb::FlatBufferBuilder b;
  auto dlq = u.dead_letter_queue ? b.CreateString(*u.dead_letter_queue) : 0;
  auto update = p::CreateQueueSettingsUpdate(
      b, u.lease_ms, u.invisibility_ms, u.max_attempts, u.retry_backoff_ms, u.retry_backoff_max_ms,
      dlq, u.retention_ms, u.max_depth, u.enqueue_paused, u.dequeue_paused, u.history_max,
      u.key_concurrency, u.ttl_ms, u.dedupe, u.rate_per_s, u.burst, u.key_rate_per_s, u.key_burst,
      u.fairness, u.overdue_first_ms);
  return Finish(b, h, p::Operation::UpdateQueue,
                p::CreateUpdateQueue(b, StringOf(b, name), update));
}

std::string BuildGetQueue(RequestHeader h, std::string_view name) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::GetQueue, p::CreateGetQueue(b, StringOf(b, name)));
}

std::string BuildListQueues(RequestHeader h) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::ListQueues, p::CreateListQueues(b));
}

std::string BuildDeleteQueue(RequestHeader h, std::string_view name) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::DeleteQueue, p::CreateDeleteQueue(b, StringOf(b, name)));
}

std::string BuildPurgeQueue(RequestHeader h, std::string_view name,
                            const std::vector<MessageState>& states) {
  fb::FlatBufferBuilder b;
  auto n = StringOf(b, name);
  auto v = b.CreateVector(states);
  return Finish(b, h, p::Operation::PurgeQueue, p::CreatePurgeQueue(b, n, v));
}

namespace {

fb::Offset<p::EnqueueItem> EncodeItem(fb::FlatBufferBuilder& b, const EnqueueItem& item) {
  auto id = item.id.empty() ? 0 : b.CreateString(item.id);
  auto payload =
      b.CreateVector(reinterpret_cast<const uint8_t*>(item.payload.data()), item.payload.size());
  auto metadata = PairsOf(b, item.metadata);
  auto depends_on = item.depends_on.empty() ? 0 : StringsOf(b, item.depends_on);
  auto batch = item.batch.empty() ? 0 : b.CreateString(item.batch);
  return p::CreateEnqueueItem(b, id, item.priority, payload, metadata, item.delay_ms,
                              item.visible_at, item.max_attempts, depends_on,
                              item.on_dependency_failure, batch, item.ttl_ms, item.debounce_ms);
}

fb::Offset<fb::Vector<fb::Offset<p::FlowNode>>> EncodeFlowNodes(
    fb::FlatBufferBuilder& b, const std::vector<FlowNode>& nodes) {
  std::vector<fb::Offset<p::FlowNode>> out;
  out.reserve(nodes.size());
  for (const FlowNode& node : nodes) {
    auto children = node.children.empty() ? 0 : EncodeFlowNodes(b, node.children);
    auto item = EncodeItem(b, node.item);
    auto queue = StringOf(b, node.queue);
    out.push_back(p::CreateFlowNode(b, queue, item, children));
  }
  return b.CreateVector(out);
}

}  // namespace

std::string BuildEnqueue(RequestHeader h, std::string_view queue,
                         const std::vector<EnqueueItem>& items, uint32_t wait_ms) {
  fb::FlatBufferBuilder b(1024 + items.size() * 128);
  std::vector<fb::Offset<p::EnqueueItem>> out;
  out.reserve(items.size());
  for (const EnqueueItem& item : items) out.push_back(EncodeItem(b, item));
  auto q = StringOf(b, queue);
  return Finish(b, h, p::Operation::Enqueue, p::CreateEnqueue(b, q, b.CreateVector(out), wait_ms));
}

std::string BuildEnqueueFlow(RequestHeader h, const std::vector<FlowNode>& roots) {
  fb::FlatBufferBuilder b(1024);
  auto nodes = EncodeFlowNodes(b, roots);
  return Finish(b, h, p::Operation::EnqueueFlow, p::CreateEnqueueFlow(b, nodes));
}

std::string BuildDequeue(RequestHeader h, std::string_view queue, const DequeueOptions& o) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto filter = PairsOf(b, o.filter);
  auto worker = o.worker_id.empty() ? 0 : StringOf(b, o.worker_id);
  return Finish(b, h, p::Operation::Dequeue,
                p::CreateDequeue(b, q, o.max, o.lease_ms, filter, o.wait_ms,
                                 o.include_dependency_results, worker));
}

namespace {

std::string BuildCompleteWith(RequestHeader h, std::string_view queue,
                              const std::vector<CompleteItem>& items, const DequeueOptions* next) {
  fb::FlatBufferBuilder b;
  std::vector<fb::Offset<p::CompleteItem>> out;
  out.reserve(items.size());
  for (const CompleteItem& item : items) {
    auto id = b.CreateString(item.id);
    auto result = item.result.empty()
                      ? 0
                      : b.CreateVector(reinterpret_cast<const uint8_t*>(item.result.data()),
                                       item.result.size());
    out.push_back(p::CreateCompleteItem(b, id, item.lease_token, result));
  }
  auto vector = b.CreateVector(out);
  fb::Offset<p::Dequeue> dequeue = 0;
  if (next != nullptr) {
    auto filter = PairsOf(b, next->filter);
    auto worker = next->worker_id.empty() ? 0 : StringOf(b, next->worker_id);
    dequeue = p::CreateDequeue(b, 0, next->max, next->lease_ms, filter, next->wait_ms,
                               next->include_dependency_results, worker);
  }
  auto q = StringOf(b, queue);
  return Finish(b, h, p::Operation::Complete, p::CreateComplete(b, q, vector, dequeue));
}

}  // namespace

std::string BuildComplete(RequestHeader h, std::string_view queue,
                          const std::vector<CompleteItem>& items) {
  return BuildCompleteWith(h, queue, items, nullptr);
}

std::string BuildCompleteAndNext(RequestHeader h, std::string_view queue,
                                 const std::vector<CompleteItem>& items,
                                 const DequeueOptions& next) {
  return BuildCompleteWith(h, queue, items, &next);
}

std::string BuildFail(RequestHeader h, std::string_view queue, std::string_view id,
                      uint64_t lease_token, const FailOptions& o) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  auto error = b.CreateString(o.error);
  fb::Offset<p::Dequeue> next = 0;
  if (o.next) {
    auto filter = PairsOf(b, o.next->filter);
    auto worker = o.next->worker_id.empty() ? 0 : StringOf(b, o.next->worker_id);
    next = p::CreateDequeue(b, 0, o.next->max, o.next->lease_ms, filter, o.next->wait_ms,
                            o.next->include_dependency_results, worker);
  }
  return Finish(b, h, p::Operation::Fail,
                p::CreateFail(b, q, i, lease_token, error, o.retry_delay_ms, next));
}

std::string BuildExtend(RequestHeader h, std::string_view queue, std::string_view id,
                        uint64_t lease_token, int64_t lease_ms) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  return Finish(b, h, p::Operation::Extend, p::CreateExtend(b, q, i, lease_token, lease_ms));
}

std::string BuildHistory(RequestHeader h, std::string_view queue, std::string_view id) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  return Finish(b, h, p::Operation::History, p::CreateHistory(b, q, i));
}

std::string BuildNote(RequestHeader h, std::string_view queue, std::string_view id,
                      uint64_t lease_token, std::string_view text) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  auto t = StringOf(b, text);
  return Finish(b, h, p::Operation::Note, p::CreateNote(b, q, i, lease_token, t));
}

std::string BuildSetKeyLimits(RequestHeader h, std::string_view queue, std::string_view value,
                              const KeyLimits& l) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto v = StringOf(b, value);
  auto limits = p::CreateKeyLimits(b, l.concurrency, l.rate_per_s, l.burst, l.weight);
  return Finish(b, h, p::Operation::SetKeyLimits, p::CreateSetKeyLimits(b, q, v, limits));
}

std::string BuildGetKeyLimits(RequestHeader h, std::string_view queue, std::string_view value) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto v = StringOf(b, value);
  return Finish(b, h, p::Operation::GetKeyLimits, p::CreateGetKeyLimits(b, q, v));
}

std::string BuildListKeys(RequestHeader h, std::string_view queue, p::KeyOrder order,
                          uint32_t limit) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  return Finish(b, h, p::Operation::ListKeys, p::CreateListKeys(b, q, order, limit));
}

std::string BuildCancel(RequestHeader h, std::string_view queue,
                        const std::vector<std::string>& ids) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto v = StringsOf(b, ids);
  return Finish(b, h, p::Operation::Cancel, p::CreateCancel(b, q, v));
}

std::string BuildCancelByFilter(RequestHeader h, std::string_view queue, const Pairs& filter) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, filter);
  return Finish(b, h, p::Operation::Cancel, p::CreateCancel(b, q, 0, f));
}

std::string BuildReprioritize(RequestHeader h, std::string_view queue, std::string_view id,
                              const ReprioritizeChange& change) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  return Finish(b, h, p::Operation::Reprioritize,
                p::CreateReprioritize(b, q, i, 0, change.priority, change.visible_at));
}

std::string BuildReprioritizeByFilter(RequestHeader h, std::string_view queue, const Pairs& filter,
                                      const ReprioritizeChange& change) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, filter);
  return Finish(b, h, p::Operation::Reprioritize,
                p::CreateReprioritize(b, q, 0, f, change.priority, change.visible_at));
}

std::string BuildRedrive(RequestHeader h, std::string_view queue,
                         const std::vector<std::string>& ids) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto v = StringsOf(b, ids);
  return Finish(b, h, p::Operation::Redrive, p::CreateRedrive(b, q, v));
}

std::string BuildRedriveAll(RequestHeader h, std::string_view queue) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  return Finish(b, h, p::Operation::Redrive, p::CreateRedrive(b, q, 0, true));
}

std::string BuildRedriveByFilter(RequestHeader h, std::string_view queue, const Pairs& filter) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, filter);
  return Finish(b, h, p::Operation::Redrive, p::CreateRedrive(b, q, 0, false, f));
}

std::string BuildGet(RequestHeader h, std::string_view queue, std::string_view id,
                     bool include_dependency_results) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  return Finish(b, h, p::Operation::Get, p::CreateGet(b, q, i, include_dependency_results));
}

std::string BuildBrowse(RequestHeader h, std::string_view queue, const BrowseOptions& o) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, o.filter);
  auto cursor = o.cursor.empty() ? 0 : b.CreateString(o.cursor);
  return Finish(b, h, p::Operation::Browse, p::CreateBrowse(b, q, o.state, f, cursor, o.limit));
}

std::string BuildCount(RequestHeader h, std::string_view queue, const Pairs& filter) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, filter);
  return Finish(b, h, p::Operation::Count, p::CreateCount(b, q, f));
}

std::string BuildExplain(RequestHeader h, std::string_view queue, std::string_view id) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto i = StringOf(b, id);
  return Finish(b, h, p::Operation::Explain, p::CreateExplain(b, q, i));
}

std::string BuildExplainFilter(RequestHeader h, std::string_view queue, const Pairs& filter) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, filter);
  return Finish(b, h, p::Operation::Explain, p::CreateExplain(b, q, 0, f));
}

std::string BuildSubscribe(RequestHeader h, std::string_view queue, const Pairs& filter) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto f = PairsOf(b, filter);
  return Finish(b, h, p::Operation::Subscribe, p::CreateSubscribe(b, q, f));
}

std::string BuildStats(RequestHeader h) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::Stats, p::CreateStats(b));
}

std::string BuildHealth(RequestHeader h) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::Health, p::CreateHealth(b));
}

std::string BuildCluster(RequestHeader h) {
  fb::FlatBufferBuilder b;
  return Finish(b, h, p::Operation::Cluster, p::CreateCluster(b));
}

std::string BuildSwitchover(RequestHeader h, std::string_view to) {
  fb::FlatBufferBuilder b;
  auto target = to.empty() ? 0 : b.CreateString(to);
  return Finish(b, h, p::Operation::Switchover, p::CreateSwitchover(b, target));
}

std::string BuildWait(RequestHeader h, std::string_view queue, const std::vector<std::string>& ids,
                      uint32_t wait_ms) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  std::vector<fb::Offset<fb::String>> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) out.push_back(b.CreateString(id));
  return Finish(b, h, p::Operation::Wait, p::CreateWait(b, q, b.CreateVector(out), wait_ms));
}

std::string BuildUpsertSchedule(RequestHeader h, std::string_view queue, std::string_view name,
                                const ScheduleTemplate& t) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto n = StringOf(b, name);
  auto cron = t.cron.empty() ? 0 : b.CreateString(t.cron);
  auto tz = t.tz.empty() ? 0 : b.CreateString(t.tz);
  auto payload =
      b.CreateVector(reinterpret_cast<const uint8_t*>(t.payload.data()), t.payload.size());
  auto metadata = PairsOf(b, t.metadata);
  return Finish(
      b, h, p::Operation::UpsertSchedule,
      p::CreateUpsertSchedule(b, q, n, cron, tz, t.every_ms, payload, metadata,
                              t.priority_offset_ms, t.max_attempts, t.misfire, t.overlap));
}

std::string BuildGetSchedule(RequestHeader h, std::string_view queue, std::string_view name) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto n = StringOf(b, name);
  return Finish(b, h, p::Operation::GetSchedule, p::CreateGetSchedule(b, q, n));
}

std::string BuildListSchedules(RequestHeader h, std::string_view queue) {
  fb::FlatBufferBuilder b;
  auto q = queue.empty() ? 0 : b.CreateString(queue);
  return Finish(b, h, p::Operation::ListSchedules, p::CreateListSchedules(b, q));
}

std::string BuildDeleteSchedule(RequestHeader h, std::string_view queue, std::string_view name) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto n = StringOf(b, name);
  return Finish(b, h, p::Operation::DeleteSchedule, p::CreateDeleteSchedule(b, q, n));
}

std::string BuildPauseSchedule(RequestHeader h, std::string_view queue, std::string_view name) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto n = StringOf(b, name);
  return Finish(b, h, p::Operation::PauseSchedule, p::CreatePauseSchedule(b, q, n));
}

std::string BuildResumeSchedule(RequestHeader h, std::string_view queue, std::string_view name) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto n = StringOf(b, name);
  return Finish(b, h, p::Operation::ResumeSchedule, p::CreateResumeSchedule(b, q, n));
}

std::string BuildTriggerSchedule(RequestHeader h, std::string_view queue, std::string_view name) {
  fb::FlatBufferBuilder b;
  auto q = StringOf(b, queue);
  auto n = StringOf(b, name);
  return Finish(b, h, p::Operation::TriggerSchedule, p::CreateTriggerSchedule(b, q, n));
}

std::string BuildCreateBatch(RequestHeader h, std::string_view id, const CreateBatchOptions& o) {
  fb::FlatBufferBuilder b;
  auto batch_id = StringOf(b, id);
  fb::Offset<p::BatchCallback> callback;
  if (o.callback) {
    const BatchCallback& c = *o.callback;
    auto queue = StringOf(b, c.queue);
    auto callback_id = c.id.empty() ? 0 : b.CreateString(c.id);
    auto payload =
        b.CreateVector(reinterpret_cast<const uint8_t*>(c.payload.data()), c.payload.size());
    auto metadata = PairsOf(b, c.metadata);
    callback = p::CreateBatchCallback(b, queue, callback_id, c.priority, payload, metadata,
                                      c.max_attempts);
  }
  return Finish(b, h, p::Operation::CreateBatch,
                p::CreateCreateBatch(b, batch_id, callback, o.retention_ms));
}

std::string BuildSealBatch(RequestHeader h, std::string_view id) {
  fb::FlatBufferBuilder b;
  auto batch_id = StringOf(b, id);
  return Finish(b, h, p::Operation::SealBatch, p::CreateSealBatch(b, batch_id));
}

std::string BuildGetBatch(RequestHeader h, std::string_view id) {
  fb::FlatBufferBuilder b;
  auto batch_id = StringOf(b, id);
  return Finish(b, h, p::Operation::GetBatch, p::CreateGetBatch(b, batch_id));
}

std::optional<RequestSummary> SummarizeRequest(std::string_view bytes) {
  fb::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!p::VerifyRequestBuffer(verifier)) return std::nullopt;
  const p::Request* request = p::GetRequest(bytes.data());
  RequestSummary out;
  out.request_id = request->request_id();
  if (const p::Dequeue* d = request->op_as_Dequeue()) out.wait_ms = d->wait_ms();
  if (const p::Wait* w = request->op_as_Wait()) out.wait_ms = w->wait_ms();
  if (const p::Enqueue* e = request->op_as_Enqueue()) out.wait_ms = e->wait_ms();
  return out;
}

}  // namespace sundial::client
