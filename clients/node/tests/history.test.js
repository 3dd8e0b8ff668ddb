// History against a real sundiald (docs/semantics.md, "History"; docs/protocol.md, "History",
// "Note"): dequeue's and completeAndNext's worker_id, note, history(), the history_max setting,
// explain's dependents, and the refusals.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { rejectsWith, uniqueQueue, useServer } = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

test("history shows each transition with its worker, note and error", async () => {
  const queue = uniqueQueue("history");
  await client.createQueue(queue, { retry_backoff_ms: 1, retry_backoff_max_ms: 1 });
  await client.enqueue(queue, "job", { id: "m1" });
  const [first] = await client.dequeue(queue, { worker_id: "host-a/pid-1" });
  await client.note(queue, "m1", first.lease_token, "rendered, sending");
  await client.fail(queue, "m1", first.lease_token, { error: "SMTP 451", retry_delay_ms: 0 });
  const [second] = await client.dequeue(queue, { worker_id: "host-b/pid-2", wait_ms: 5_000 });
  assert.equal(second.id, "m1");
  const next = await client.completeAndNext(queue, [{ id: "m1", lease_token: second.lease_token, result: "ok" }], {
    worker_id: "host-b/pid-2",
  });
  assert.deepEqual(next.errors, [null]);

  const h = await client.history(queue, "m1");
  assert.equal(h.dropped, 0);
  const events = h.entries.map((e) => e.event);
  assert.deepEqual(events.filter((e) => e !== "became_visible"), ["enqueued", "leased", "noted", "failed", "leased", "completed"]);
  const leased = h.entries.filter((e) => e.event === "leased");
  assert.deepEqual(leased.map((e) => [e.from, e.to, e.attempt, e.worker_id, e.actor]), [
    ["pending", "running", 1, "host-a/pid-1", "worker"],
    ["pending", "running", 2, "host-b/pid-2", "worker"],
  ]);
  assert.equal(leased[0].lease_token, first.lease_token);
  const noted = h.entries.find((e) => e.event === "noted");
  assert.equal(noted.text, "rendered, sending");
  const failed = h.entries.find((e) => e.event === "failed");
  assert.deepEqual([failed.text, failed.worker_id, failed.from], ["SMTP 451", "host-a/pid-1", "running"]);
  assert.equal(h.entries.at(-1).to, "completed");
  for (let i = 1; i < h.entries.length; i++) assert.ok(h.entries[i].time >= h.entries[i - 1].time, "oldest first");

  // A note needs the current lease.
  await rejectsWith(client.note(queue, "m1", first.lease_token, "late"), { code: "FAILED_PRECONDITION" });
  await rejectsWith(client.history(queue, "nope"), { code: "NOT_FOUND" });
});

test("history_max bounds the entries: the first and the latest kept, the rest counted", async () => {
  const queue = uniqueQueue("history-max");
  const created = await client.createQueue(queue, { history_max: 3 });
  assert.equal(created.history_max, 3);
  await client.enqueue(queue, "job", { id: "m1" });
  const [m] = await client.dequeue(queue);
  for (let i = 0; i < 4; i++) await client.note(queue, "m1", m.lease_token, `step ${i}`);
  const h = await client.history(queue, "m1");
  assert.equal(h.entries.length, 3);
  assert.equal(h.entries[0].event, "enqueued");
  assert.equal(h.entries.at(-1).text, "step 3");
  assert.equal(h.dropped, 3);

  const updated = await client.updateQueue(queue, { history_max: 0 });
  assert.equal(updated.history_max, 0);
  await rejectsWith(client.note(queue, "m1", m.lease_token, "off"), { code: "FAILED_PRECONDITION" });
  assert.equal((await client.getQueue(queue)).history_max, 0);
});

test("explain names the dependents still waiting", async () => {
  const queue = uniqueQueue("dependents");
  await client.enqueue(queue, "p", { id: "parent" });
  await client.enqueue(queue, "a", { id: "a", depends_on: ["parent"] });
  await client.enqueue(queue, "b", { id: "b", depends_on: ["parent"] });
  const why = await client.explain(queue, "parent");
  assert.deepEqual([why.dependents, why.waiting_dependents], [[`${queue}/a`, `${queue}/b`], 2]);
  const [p] = await client.dequeue(queue);
  await client.complete(queue, "parent", p.lease_token);
  const done = await client.explain(queue, "parent");
  assert.deepEqual([done.reason, done.dependents, done.waiting_dependents], ["terminal", [], 0]);
});

test("bad input is refused locally", async () => {
  const queue = uniqueQueue("history-bad");
  await rejectsWith(client.dequeue(queue, { worker_id: "x".repeat(129) }), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.note(queue, "m", 1, ""), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.note(queue, "m", 1, "x".repeat(1025)), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.createQueue(queue, { history_max: -1 }), { code: "INVALID_ARGUMENT", origin: "local" });
});
