// Schedules and batches (docs/semantics.md, "Schedules" and "Batches"): their requests and
// replies, beside codec.ts's queue and message operations. The rules of the Python client's
// upsert_schedule, create_batch and the others (docs/clients/python.md), in this client's
// shape: options objects with the protocol's names, errors before anything is sent.

import * as flatbuffers from "flatbuffers";

import {
  Call,
  addPresent,
  byteVector,
  bytesOf,
  call,
  checkKeys,
  createString,
  enumName,
  expect,
  int64,
  metadataOf,
  optional,
  pairVector,
  pairs,
  payloadBytes,
  str,
  text,
  uint32,
} from "./codec";
import { invalidArgument } from "./errors";
import * as P from "./generated";
import { Batch, BatchCallback, MISFIRE_POLICIES, OVERLAP_POLICIES, Schedule, ScheduleTrigger } from "./records";

// ---- Schedules -----------------------------------------------------------------------------------

/** upsertSchedule's spec: exactly one of cron (with tz) and every_ms, and the template. */
export const SCHEDULE_KEYS = [
  "cron",
  "tz",
  "every_ms",
  "payload",
  "metadata",
  "priority_offset_ms",
  "max_attempts",
  "misfire",
  "overlap",
] as const;

function policy(name: string, names: readonly string[], value: unknown): number {
  if (value == null) return 0;
  const index = names.indexOf(value as string);
  if (index < 0) throw invalidArgument(`${name}: ${JSON.stringify(value)} is not one of ${names.join(", ")}`);
  return index;
}

function decodeSchedule(s: P.Schedule): Schedule {
  return {
    queue: text(s.queue()),
    name: text(s.name()),
    cron: text(s.cron()),
    tz: text(s.tz()),
    every_ms: Number(s.everyMs()),
    payload: bytesOf(s.payloadArray()),
    metadata: metadataOf(s),
    priority_offset_ms: Number(s.priorityOffsetMs()),
    max_attempts: s.maxAttempts(),
    misfire: enumName(MISFIRE_POLICIES, s.misfire()),
    overlap: enumName(OVERLAP_POLICIES, s.overlap()),
    paused: s.paused(),
    next_fire_at: Number(s.nextFireAt()),
    last_fire_at: Number(s.lastFireAt()),
    last_enqueued_at: Number(s.lastEnqueuedAt()),
    fires: Number(s.fires()),
    overlap_skips: Number(s.overlapSkips()),
    missed: Number(s.missed()),
    failed: Number(s.failed()),
    last_error: text(s.lastError()),
    created_at: Number(s.createdAt()),
    updated_at: Number(s.updatedAt()),
  };
}

function scheduleResult(name: string) {
  return (response: P.Response): Schedule & { created: boolean } => {
    const r = expect(response, P.Result.ScheduleResult, new P.ScheduleResult(), name);
    const s = r.schedule();
    if (s === null) throw invalidArgument(`${name}: the reply has no schedule`);
    return { ...decodeSchedule(s), created: r.created() };
  };
}

/** Creates or replaces schedule (queue, name); `created` says which. */
export function upsertSchedule(queue: unknown, name: unknown, spec: unknown): Call<Schedule & { created: boolean }> {
  const q = str("queue", queue);
  const n = str("name", name);
  const o = checkKeys("schedule", spec, SCHEDULE_KEYS);
  const cron = optional(o.cron, (x) => str("cron", x));
  const everyMs = optional(o.every_ms, (x) => int64("every_ms", x));
  if ((cron === undefined) === (everyMs === undefined)) {
    throw invalidArgument("cron, every_ms: give exactly one");
  }
  const tz = optional(o.tz, (x) => str("tz", x));
  if (tz !== undefined && cron === undefined) throw invalidArgument("tz: only with cron");
  const payload = payloadBytes(o.payload);
  const metadata = pairs("metadata", o.metadata);
  const offset = o.priority_offset_ms == null ? 0n : int64("priority_offset_ms", o.priority_offset_ms);
  const attempts = o.max_attempts == null ? 0 : uint32("max_attempts", o.max_attempts);
  const misfire = policy("misfire", MISFIRE_POLICIES, o.misfire);
  const overlap = policy("overlap", OVERLAP_POLICIES, o.overlap);
  return call("upsertSchedule", P.Operation.UpsertSchedule, true, (b) => {
    const qo = createString(b, q);
    const no = createString(b, n);
    const co = cron ? createString(b, cron) : 0;
    const to = tz ? createString(b, tz) : 0;
    const po = payload.length ? byteVector(b, payload) : 0;
    const mo = metadata.length ? pairVector(b, metadata) : 0;
    P.UpsertSchedule.startUpsertSchedule(b);
    P.UpsertSchedule.addQueue(b, qo);
    P.UpsertSchedule.addName(b, no);
    if (co) P.UpsertSchedule.addCron(b, co);
    if (to) P.UpsertSchedule.addTz(b, to);
    if (everyMs !== undefined) P.UpsertSchedule.addEveryMs(b, everyMs);
    if (po) P.UpsertSchedule.addPayload(b, po);
    if (mo) P.UpsertSchedule.addMetadata(b, mo);
    if (offset !== 0n) P.UpsertSchedule.addPriorityOffsetMs(b, offset);
    if (attempts) P.UpsertSchedule.addMaxAttempts(b, attempts);
    if (misfire) P.UpsertSchedule.addMisfire(b, misfire);
    if (overlap) P.UpsertSchedule.addOverlap(b, overlap);
    return P.UpsertSchedule.endUpsertSchedule(b);
  }, scheduleResult("upsertSchedule"));
}

type NamedOp = "GetSchedule" | "DeleteSchedule" | "PauseSchedule" | "ResumeSchedule" | "TriggerSchedule";

// The operations that name one schedule: { queue, name } tables alike.
function named<T>(
  method: string,
  op: NamedOp,
  mutates: boolean,
  queue: unknown,
  name: unknown,
  decode: (response: P.Response) => T,
  resend = true,
): Call<T> {
  const q = str("queue", queue);
  const n = str("name", name);
  const table = P[op] as unknown as {
    [key: string]: (b: flatbuffers.Builder, o?: flatbuffers.Offset) => flatbuffers.Offset;
  };
  return call(method, P.Operation[op], mutates, (b) => {
    const qo = createString(b, q);
    const no = createString(b, n);
    table[`start${op}`]!(b);
    table.addQueue!(b, qo);
    table.addName!(b, no);
    return table[`end${op}`]!(b);
  }, decode, { resend });
}

export function getSchedule(queue: unknown, name: unknown): Call<Schedule> {
  return named("getSchedule", "GetSchedule", false, queue, name, scheduleResult("getSchedule"));
}

export function pauseSchedule(queue: unknown, name: unknown): Call<Schedule> {
  return named("pauseSchedule", "PauseSchedule", true, queue, name, scheduleResult("pauseSchedule"));
}

export function resumeSchedule(queue: unknown, name: unknown): Call<Schedule> {
  return named("resumeSchedule", "ResumeSchedule", true, queue, name, scheduleResult("resumeSchedule"));
}

/** Never sent twice: a repeat would delete a schedule made again meanwhile. */
export function deleteSchedule(queue: unknown, name: unknown): Call<void> {
  return named("deleteSchedule", "DeleteSchedule", true, queue, name, (response) => {
    expect(response, P.Result.Done, new P.Done(), "deleteSchedule");
  }, false);
}

/** A fire now; never sent twice (a repeat is a second fire at a later T). */
export function triggerSchedule(queue: unknown, name: unknown): Call<ScheduleTrigger> {
  return named("triggerSchedule", "TriggerSchedule", true, queue, name, (response) => {
    const r = expect(response, P.Result.TriggerResult, new P.TriggerResult(), "triggerSchedule");
    return { id: text(r.id()), fire_at: Number(r.fireAt()), duplicate: r.duplicate() };
  }, false);
}

/** Every schedule of `queue` (absent or "": of every queue), by queue then name. */
export function listSchedules(queue: unknown): Call<Schedule[]> {
  const q = queue == null ? "" : str("queue", queue);
  return call("listSchedules", P.Operation.ListSchedules, false, (b) => {
    const qo = q ? createString(b, q) : 0;
    P.ListSchedules.startListSchedules(b);
    if (qo) P.ListSchedules.addQueue(b, qo);
    return P.ListSchedules.endListSchedules(b);
  }, (response) => {
    const r = expect(response, P.Result.ScheduleList, new P.ScheduleList(), "listSchedules");
    const out: Schedule[] = [];
    for (let i = 0, n = r.schedulesLength(); i < n; i++) out.push(decodeSchedule(r.schedules(i)!));
    return out;
  });
}

// ---- Batches -------------------------------------------------------------------------------------

export const CALLBACK_KEYS = ["queue", "id", "priority", "payload", "metadata", "max_attempts"] as const;

function decodeBatch(response: P.Response, name: string): Batch {
  const r = expect(response, P.Result.BatchResult, new P.BatchResult(), name);
  const b = r.batch();
  if (b === null) throw invalidArgument(`${name}: the reply has no batch`);
  const c = b.callback();
  let callback: BatchCallback | null = null;
  if (c !== null) {
    callback = {
      queue: text(c.queue()),
      id: text(c.id()),
      priority: Number(c.priority()),
      payload: bytesOf(c.payloadArray()),
      metadata: metadataOf(c),
      max_attempts: c.maxAttempts(),
    };
  }
  return {
    id: text(b.id()),
    callback,
    retention_ms: Number(b.retentionMs()),
    created_at: Number(b.createdAt()),
    sealed: b.sealed(),
    done: b.done(),
    done_at: Number(b.doneAt()),
    members: Number(b.members()),
    active: Number(b.active()),
    completed: Number(b.completed()),
    canceled: Number(b.canceled()),
    errored: Number(b.errored()),
  };
}

/** A new open batch; repeating it with the same callback and retention answers it as it is. */
export function createBatch(id: unknown, callback: unknown, retentionMs: unknown): Call<Batch> {
  const batchId = str("id", id);
  const c = callback == null ? null : checkKeys("callback", callback, CALLBACK_KEYS);
  const cb = c && {
    queue: str("callback.queue", c.queue),
    id: c.id == null ? "" : str("callback.id", c.id),
    priority: c.priority == null ? 0n : int64("callback.priority", c.priority),
    payload: payloadBytes(c.payload),
    metadata: pairs("callback.metadata", c.metadata),
    max_attempts: optional(c.max_attempts, (x) => uint32("callback.max_attempts", x)),
  };
  const retention = optional(retentionMs, (x) => int64("retention_ms", x));
  return call("createBatch", P.Operation.CreateBatch, true, (b) => {
    const io = createString(b, batchId);
    let co = 0;
    if (cb) {
      const qo = createString(b, cb.queue);
      const cio = cb.id ? createString(b, cb.id) : 0;
      const po = cb.payload.length ? byteVector(b, cb.payload) : 0;
      const mo = cb.metadata.length ? pairVector(b, cb.metadata) : 0;
      P.BatchCallback.startBatchCallback(b);
      P.BatchCallback.addQueue(b, qo);
      if (cio) P.BatchCallback.addId(b, cio);
      if (cb.priority !== 0n) P.BatchCallback.addPriority(b, cb.priority);
      if (po) P.BatchCallback.addPayload(b, po);
      if (mo) P.BatchCallback.addMetadata(b, mo);
      if (cb.max_attempts !== undefined) addPresent(b, () => P.BatchCallback.addMaxAttempts(b, cb.max_attempts!));
      co = P.BatchCallback.endBatchCallback(b);
    }
    P.CreateBatch.startCreateBatch(b);
    P.CreateBatch.addId(b, io);
    if (co) P.CreateBatch.addCallback(b, co);
    if (retention !== undefined) addPresent(b, () => P.CreateBatch.addRetentionMs(b, retention));
    return P.CreateBatch.endCreateBatch(b);
  }, (response) => decodeBatch(response, "createBatch"));
}

type BatchOp = "SealBatch" | "GetBatch";

function batchById(method: string, op: BatchOp, mutates: boolean, id: unknown): Call<Batch> {
  const batchId = str("id", id);
  const table = P[op] as unknown as {
    [key: string]: (b: flatbuffers.Builder, o?: flatbuffers.Offset) => flatbuffers.Offset;
  };
  return call(method, P.Operation[op], mutates, (b) => {
    const io = createString(b, batchId);
    table[`start${op}`]!(b);
    table.addId!(b, io);
    return table[`end${op}`]!(b);
  }, (response) => decodeBatch(response, method));
}

/** No member may join any more; done at once when no member is active. Repeating it is harmless. */
export function sealBatch(id: unknown): Call<Batch> {
  return batchById("sealBatch", "SealBatch", true, id);
}

export function getBatch(id: unknown): Call<Batch> {
  return batchById("getBatch", "GetBatch", false, id);
}
