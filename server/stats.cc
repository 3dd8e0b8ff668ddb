// Stats: the server's figures for a Stats reply and the StatsTick event (docs/protocol.md,
// "Stats").
#include "protocol/sundial_generated.h"
#include "server/internal.h"

namespace sundial::server {

namespace fb = flatbuffers;
namespace p = protocol;

uint32_t Core::BuildStatsResult(fb::FlatBufferBuilder& b) const {
  return BuildStatsResult(b, engine_->ListQueues());
}

uint32_t Core::BuildStatsResult(fb::FlatBufferBuilder& b,
                                const std::vector<QueueInfo>& queues) const {
  StateCounts total;
  for (const QueueInfo& q : queues) {
    for (size_t s = 0; s < total.by_state.size(); ++s) total.by_state[s] += q.counts.by_state[s];
    total.blocked += q.counts.blocked;
    total.blocked_concurrency += q.counts.blocked_concurrency;
    total.blocked_rate += q.counts.blocked_rate;
  }
  auto counts = p::CreateStateCounts(
      b, total[MessageState::kInvisible], total[MessageState::kPending],
      total[MessageState::kRunning], total[MessageState::kCompleted],
      total[MessageState::kCanceled], total[MessageState::kErrored], total.blocked,
      total[MessageState::kWaiting], total.blocked_concurrency, total.blocked_rate);
  const wal::LogStats ls = log_ ? log_->stats() : wal::LogStats{};
  const double fsync_mean_us =
      ls.syncs ? static_cast<double>(ls.sync_nanos) / static_cast<double>(ls.syncs) / 1000.0 : 0.0;
  const auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started_).count();
  return p::CreateStatsResult(b, uptime, queues.size(), counts, engine_->memory_bytes(),
                              engine_->memory_budget_bytes(),
                              static_cast<uint64_t>(metrics_->connections()), ls.next_lsn,
                              ls.durable_end_lsn, ls.syncs, fsync_mean_us, ls.bytes,
                              log_ != nullptr && log_->failed())
      .o;
}

namespace {

// `queues`: the per-queue part (Subscribe.queue_stats), or 0 for none.
std::shared_ptr<const std::string> FinishTick(
    fb::FlatBufferBuilder& b, uint32_t stats, TimeMs now,
    fb::Offset<fb::Vector<fb::Offset<p::QueueStats>>> queues) {
  auto tick = p::CreateStatsTick(b, fb::Offset<p::StatsResult>(stats), now, queues);
  auto body = p::CreateEventMessage(b, p::Event::StatsTick, tick.Union());
  b.Finish(p::CreateServerMessage(b, p::ServerBody::EventMessage, body.Union()));
  return std::make_shared<const std::string>(reinterpret_cast<const char*>(b.GetBufferPointer()),
                                             b.GetSize());
}

}  // namespace

Core::StatsTicks Core::BuildStatsTicks(bool with_queues) const {
  // One ListQueues and one clock reading for both: the two ticks of a second say the same.
  const std::vector<QueueInfo> queues = engine_->ListQueues();
  const TimeMs now = engine_->clock().NowMs();
  StatsTicks ticks;
  fb::FlatBufferBuilder b(512);
  ticks.plain = FinishTick(b, BuildStatsResult(b, queues), now, 0);
  if (with_queues) {
    // About 170 bytes a queue: sized once for the whole vector.
    fb::FlatBufferBuilder rich(1024 + 200 * queues.size());
    const uint32_t stats = BuildStatsResult(rich, queues);
    ticks.with_queues = FinishTick(rich, stats, now, EncodeQueueStats(rich, queues, activity_));
  }
  return ticks;
}

}  // namespace sundial::server
