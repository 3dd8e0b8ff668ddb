// Expiry, dedupe while_active and debounce against a real sundiald (docs/semantics.md, "Flow
// control"): ttl_ms and dedupe as queue settings, a short ttl canceled as expired by the
// server's timer (polled with a deadline), a debounce replacing a pending message, a released id.
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

test("ttl_ms and dedupe are queue settings", async () => {
  const queue = uniqueQueue("expiry");
  const q = await client.createQueue(queue, { ttl_ms: 60_000, dedupe: "while_active" });
  assert.equal(q.ttl_ms, 60_000);
  assert.equal(q.dedupe, "while_active");
  const u = await client.updateQueue(queue, { ttl_ms: 0, dedupe: "keep" });
  assert.equal(u.ttl_ms, 0);
  assert.equal(u.dedupe, "keep");
  await rejectsWith(client.createQueue(`${queue}-bad`, { dedupe: "sometimes" }), { code: "INVALID_ARGUMENT" });
});

test("a message past its ttl is canceled as expired by the timer", async () => {
  const queue = uniqueQueue("expiry");
  await client.enqueue(queue, "job", { id: "short", ttl_ms: 200 });
  let m = await client.get(queue, "short");
  assert.equal(m.expires_at, m.enqueued_at + 200);
  const deadline = Date.now() + 10_000;
  while (m.state !== "canceled" && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    m = await client.get(queue, "short");
  }
  assert.equal(m.state, "canceled");
  assert.equal(m.last_error, "expired");
});

test("debounce replaces a pending message; while_active releases a terminal id", async () => {
  const queue = uniqueQueue("expiry");
  await client.createQueue(queue, { dedupe: "while_active" });
  await client.enqueue(queue, "first", { id: "a" });
  const r = await client.enqueue(queue, "second", { id: "a", debounce_ms: 60_000 });
  assert.equal(r.duplicate, false);
  assert.equal(r.version, 2);
  const m = await client.get(queue, "a");
  assert.equal(m.state, "invisible");
  assert.equal(m.payload.toString(), "second");
  await client.cancel(queue, ["a"]);
  const again = await client.enqueue(queue, "third", { id: "a" });
  assert.equal(again.duplicate, false);
  assert.equal(again.version, 1);
});
