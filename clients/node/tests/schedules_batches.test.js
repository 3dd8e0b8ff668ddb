// Schedules and batches against a real sundiald: upsertSchedule's spec round trip and its checks,
// pause/resume/trigger/list/delete as the server sees them, a fire's message name@T in its queue;
// a batch created with a callback, members joining by enqueue's `batch`, its counts as they
// finish, the callback enqueued once with x-batch-* metadata when sealed.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { SundialError } = require("sundial-client");
const { rejectsWith, uniqueQueue, useServer } = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

test("a schedule's spec round-trips, and pause, resume, trigger, list and delete act on it", async () => {
  const queue = uniqueQueue("sched");
  const made = await client.upsertSchedule(queue, "nightly", {
    cron: "30 2 * * *", tz: "Europe/Paris", payload: "{}", metadata: { kind: "nightly" },
    priority_offset_ms: 600_000, misfire: "one", overlap: "skip_if_active",
  });
  assert.equal(made.created, true);
  assert.equal(made.cron, "30 2 * * *");
  assert.equal(made.tz, "Europe/Paris");
  assert.equal(made.misfire, "one");
  assert.equal(made.overlap, "skip_if_active");
  assert.deepEqual(made.metadata, { kind: "nightly" });
  assert.equal(made.payload.toString(), "{}");
  assert.ok(made.next_fire_at > Date.now() - 60_000, `next fire ${made.next_fire_at}`);
  const again = await client.upsertSchedule(queue, "nightly", { cron: "30 2 * * *", tz: "Europe/Paris" });
  assert.equal(again.created, false);

  await client.upsertSchedule(queue, "tick", { every_ms: 3_600_000 });
  const list = await client.listSchedules(queue);
  assert.deepEqual(list.map((s) => s.name), ["nightly", "tick"]);
  assert.equal(list[1].every_ms, 3_600_000);

  const paused = await client.pauseSchedule(queue, "tick");
  assert.equal(paused.paused, true);
  assert.equal(paused.next_fire_at, 0);
  assert.equal((await client.getSchedule(queue, "tick")).paused, true);
  const resumed = await client.resumeSchedule(queue, "tick");
  assert.equal(resumed.paused, false);
  assert.ok(resumed.next_fire_at > 0);

  const fire = await client.triggerSchedule(queue, "tick");
  assert.match(fire.id, /^tick@\d+$/);
  assert.equal(fire.id, `tick@${fire.fire_at}`);
  assert.equal(fire.duplicate, false);
  const message = await client.get(queue, fire.id);
  assert.equal(message.state, "pending");
  assert.equal((await client.getSchedule(queue, "tick")).fires, 1);

  await client.deleteSchedule(queue, "tick");
  await rejectsWith(client.getSchedule(queue, "tick"), { code: "NOT_FOUND" });
  assert.equal((await client.get(queue, fire.id)).id, fire.id, "the messages it made stay");
  assert.deepEqual((await client.listSchedules(queue)).map((s) => s.name), ["nightly"]);
});

test("upsertSchedule refuses a bad spec before sending, and the server refuses a bad cron", async () => {
  const queue = uniqueQueue("sched-bad");
  for (const [spec, what] of [
    [{}, /exactly one/],
    [{ cron: "* * * * *", every_ms: 1000 }, /exactly one/],
    [{ every_ms: 1000, tz: "UTC" }, /tz: only with cron/],
    [{ every_ms: 1000, misfire: "sometimes" }, /misfire/],
    [{ every_ms: 1000, everyMs: 5 }, /unknown option "everyMs"/],
  ]) {
    await assert.rejects(client.upsertSchedule(queue, "x", spec), (e) => {
      assert.ok(e instanceof SundialError);
      assert.equal(e.code, "INVALID_ARGUMENT");
      assert.match(e.message, what);
      return true;
    });
  }
  await rejectsWith(client.upsertSchedule(queue, "x", { cron: "61 * * * *" }), { code: "INVALID_ARGUMENT" });
  await rejectsWith(client.upsertSchedule(queue, "x", { cron: "* * * * *", tz: "Mars/Olympus" }), { code: "INVALID_ARGUMENT" });
});

test("a batch counts its members as they finish and enqueues its callback once when sealed", async () => {
  const queue = uniqueQueue("batch");
  const done = uniqueQueue("batch-done");
  const id = `b-${queue}`;
  const created = await client.createBatch(id, { callback: { queue: done, payload: "report", metadata: { tenant: "acme" } } });
  assert.equal(created.id, id);
  assert.equal(created.sealed, false);
  assert.equal(created.callback.queue, done);
  assert.equal(created.callback.id, `batch:${id}`);
  const repeat = await client.createBatch(id, { callback: { queue: done, payload: "report", metadata: { tenant: "acme" } } });
  assert.equal(repeat.created_at, created.created_at, "a repeat answers the batch as it is");
  await rejectsWith(client.createBatch(id, { retention_ms: 5 }), { code: "ALREADY_EXISTS" });

  await client.enqueueBatch(queue, [{ id: "a", batch: id }, { id: "b", batch: id }, { id: "c", batch: id }]);
  await rejectsWith(client.enqueue(queue, "x", { batch: "no-such-batch" }), { code: "NOT_FOUND" });
  const leased = await client.dequeue(queue, { max: 2 });
  await client.complete(queue, leased[0].id, leased[0].lease_token);
  await client.cancel(queue, [leased[1].id]);
  let b = await client.getBatch(id);
  assert.deepEqual([b.members, b.completed, b.canceled, b.active, b.done], [3, 1, 1, 1, false]);

  b = await client.sealBatch(id);
  assert.equal(b.sealed, true);
  assert.equal(b.done, false, "one member is still active");
  await rejectsWith(client.enqueue(queue, "late", { batch: id }), { code: "FAILED_PRECONDITION" });
  const [last] = await client.dequeue(queue);
  await client.complete(queue, last.id, last.lease_token);
  b = await client.getBatch(id);
  assert.equal(b.done, true);
  assert.ok(b.done_at > 0);
  const callback = await client.get(done, `batch:${id}`);
  assert.equal(callback.payload.toString(), "report");
  assert.equal(callback.metadata.tenant, "acme");
  assert.equal(callback.metadata["x-batch-total"], "3");
  assert.equal(callback.metadata["x-batch-completed"], "2");
  assert.equal(callback.metadata["x-batch-canceled"], "1");
  assert.equal((await client.sealBatch(id)).done, true, "sealing again is harmless");
  await rejectsWith(client.getBatch("never-made"), { code: "NOT_FOUND" });
});
