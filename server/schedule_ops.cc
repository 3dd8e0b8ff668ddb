#include "server/schedule_ops.h"

#include <string>

#include "engine/metadata.h"

namespace sundial::server {
namespace {

namespace fb = flatbuffers;
namespace p = protocol;

fb::Offset<p::Schedule> EncodeSchedule(fb::FlatBufferBuilder& b, const ScheduleInfo& s) {
  const ScheduleSpec& spec = s.spec;
  const ScheduleProgress& progress = s.progress;
  auto queue = b.CreateString(s.queue);
  auto name = b.CreateString(s.name);
  auto cron = spec.cron.empty() ? 0 : b.CreateString(spec.cron);
  auto tz = spec.tz.empty() ? 0 : b.CreateString(spec.tz);
  auto payload =
      b.CreateVector(reinterpret_cast<const uint8_t*>(spec.payload.data()), spec.payload.size());
  auto metadata = EncodePairs(b, UnpackMetadata(spec.packed_metadata).value_or(Metadata{}));
  auto last_error = s.last_error.empty() ? 0 : b.CreateString(s.last_error);
  p::ScheduleBuilder out(b);
  out.add_queue(queue);
  out.add_name(name);
  if (!cron.IsNull()) out.add_cron(cron);
  if (!tz.IsNull()) out.add_tz(tz);
  out.add_every_ms(spec.every_ms);
  out.add_payload(payload);
  out.add_metadata(metadata);
  out.add_priority_offset_ms(spec.priority_offset_ms);
  out.add_max_attempts(spec.max_attempts);
  out.add_misfire(static_cast<p::MisfirePolicy>(spec.misfire));
  out.add_overlap(static_cast<p::OverlapPolicy>(spec.overlap));
  out.add_paused(progress.paused);
  out.add_next_fire_at(s.next_fire_at);
  out.add_last_fire_at(progress.last_fire_at);
  out.add_last_enqueued_at(progress.last_enqueued_at);
  out.add_fires(progress.fires);
  out.add_overlap_skips(progress.overlap_skips);
  out.add_missed(progress.missed);
  out.add_failed(progress.failed);
  if (!last_error.IsNull()) out.add_last_error(last_error);
  out.add_created_at(progress.created_at);
  out.add_updated_at(progress.updated_at);
  return out.Finish();
}

void ScheduleReply(Reply& r, const Result<ScheduleInfo>& s, bool created = false) {
  if (!s.ok()) return r.Error(s.status());
  r.Ok(p::Result::ScheduleResult,
       p::CreateScheduleResult(r.b(), EncodeSchedule(r.b(), *s), created));
}

}  // namespace

void RunUpsertSchedule(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_UpsertSchedule();
  if (op->misfire() > p::MisfirePolicy::MAX) {
    return r.Error(InvalidArgument("misfire: one of skip, one, all"));
  }
  if (op->overlap() > p::OverlapPolicy::MAX) {
    return r.Error(InvalidArgument("overlap: one of allow, skip_if_active"));
  }
  ScheduleSpec spec;
  spec.cron = std::string(Str(op->cron()));
  spec.tz = std::string(Str(op->tz()));
  spec.every_ms = op->every_ms();
  if (op->payload()) spec.payload.assign(op->payload()->begin(), op->payload()->end());
  spec.priority_offset_ms = op->priority_offset_ms();
  spec.max_attempts = op->max_attempts();
  spec.misfire = static_cast<MisfirePolicy>(op->misfire());
  spec.overlap = static_cast<OverlapPolicy>(op->overlap());
  Result<ScheduleUpsertResult> result =
      ctx.engine->UpsertSchedule(Str(op->queue()), Str(op->name()), spec, Pairs(op->metadata()));
  if (!result.ok()) return r.Error(result.status());
  ScheduleReply(r, result->schedule, result->created);
}

void RunGetSchedule(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_GetSchedule();
  ScheduleReply(r, ctx.engine->GetSchedule(Str(op->queue()), Str(op->name())));
}

void RunListSchedules(const p::Request& request, OpContext& ctx, Reply& r) {
  auto& b = r.b();
  std::vector<fb::Offset<p::Schedule>> out;
  for (const ScheduleInfo& s :
       ctx.engine->ListSchedules(Str(request.op_as_ListSchedules()->queue()))) {
    out.push_back(EncodeSchedule(b, s));
  }
  r.Ok(p::Result::ScheduleList, p::CreateScheduleList(b, b.CreateVector(out)));
}

void RunDeleteSchedule(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_DeleteSchedule();
  if (Status s = ctx.engine->DeleteSchedule(Str(op->queue()), Str(op->name())); !s.ok()) {
    return r.Error(s);
  }
  r.Ok(p::Result::Done, p::CreateDone(r.b()));
}

void RunPauseSchedule(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_PauseSchedule();
  ScheduleReply(r, ctx.engine->PauseSchedule(Str(op->queue()), Str(op->name())));
}

void RunResumeSchedule(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_ResumeSchedule();
  ScheduleReply(r, ctx.engine->ResumeSchedule(Str(op->queue()), Str(op->name())));
}

void RunTriggerSchedule(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_TriggerSchedule();
  Result<ScheduleTriggerResult> fired =
      ctx.engine->TriggerSchedule(Str(op->queue()), Str(op->name()));
  if (!fired.ok()) return r.Error(fired.status());
  ++ctx.messages;
  auto& b = r.b();
  r.Ok(p::Result::TriggerResult,
       p::CreateTriggerResult(b, b.CreateString(fired->id), fired->fire_at, fired->duplicate));
}

}  // namespace sundial::server
