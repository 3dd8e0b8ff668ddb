// Client against a real sundiald: every method, every error code, pipelining with replies out of
// order, deadlines and unreadable replies.
"use strict";

const assert = require("node:assert/strict");
const net = require("node:net");
const { test } = require("node:test");

const { Client, SundialError } = require("sundial-client");
const { rejectsWith, uniqueQueue, useServer, waitFor } = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

const nowMs = () => Date.now();

// ---- Queues ----------------------------------------------------------------------------------

test("createQueue round-trips every setting and getQueue reads them back", async () => {
  const queue = uniqueQueue("settings");
  const dlq = `${queue}.dlq`;
  await client.createQueue(dlq);
  const q = await client.createQueue(queue, {
    lease_ms: 60000,
    invisibility_ms: 5,
    max_attempts: 3,
    retry_backoff_ms: 500,
    retry_backoff_max_ms: 9000,
    dead_letter_queue: dlq,
    retention_ms: 120000,
    max_depth: 50,
    enqueue_paused: false,
    dequeue_paused: true,
    history_max: 7,
  });
  assert.deepEqual(
    { ...q, counts: undefined, memory_bytes: undefined, oldest_pending_age_ms: undefined },
    {
      name: queue,
      type: "simple",
      exclusivity_key: null,
      lease_ms: 60000,
      invisibility_ms: 5,
      max_attempts: 3,
      retry_backoff_ms: 500,
      retry_backoff_max_ms: 9000,
      dead_letter_queue: dlq,
      retention_ms: 120000,
      max_depth: 50,
      enqueue_paused: false,
      dequeue_paused: true,
      history_max: 7,
      flow_key: null,
      key_concurrency: 0,
      ttl_ms: 0,
      dedupe: "keep",
      rate_per_s: 0,
      burst: 1,
      key_rate_per_s: 0,
      key_burst: 1,
      fairness: "none",
      overdue_first_ms: 0,
      counts: undefined,
      memory_bytes: undefined,
      oldest_pending_age_ms: undefined,
    },
  );
  assert.equal(q.counts.pending, 0);
  assert.deepEqual(await client.getQueue(queue), q);
});

test("createQueue's defaults are the server's, and a repeat with other settings is ALREADY_EXISTS", async () => {
  const queue = uniqueQueue("defaults");
  const q = await client.createQueue(queue);
  assert.equal(q.lease_ms, 30000);
  assert.equal(q.max_attempts, 5);
  assert.equal(q.retry_backoff_ms, 1000);
  assert.equal(q.retry_backoff_max_ms, 300000);
  assert.equal(q.retention_ms, 3600000);
  assert.equal(q.dead_letter_queue, null);
  assert.equal((await client.createQueue(queue)).name, queue);
  const e = await rejectsWith(client.createQueue(queue, { max_attempts: 4 }), { code: "ALREADY_EXISTS", origin: "server" });
  assert.match(e.message, /settings/);
});

test("createQueue refuses bad names, values and unknown settings", async () => {
  await rejectsWith(client.createQueue("no spaces"), { code: "INVALID_ARGUMENT", origin: "server", message: /name/ });
  await rejectsWith(client.createQueue("x", { lease_ms: 0 }), { code: "INVALID_ARGUMENT", message: /lease_ms/ });
  await rejectsWith(client.createQueue("x", { type: "fifo" }), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.createQueue("x", { leaseMs: 5 }), { code: "INVALID_ARGUMENT", origin: "local", message: /unknown option "leaseMs"/ });
  await rejectsWith(client.createQueue("x", { dead_letter_queue: "does-not-exist-anywhere" }), { code: "NOT_FOUND" });
});

test("an exclusive queue needs its key in every message and runs one per value", async () => {
  const queue = uniqueQueue("exclusive");
  const q = await client.createQueue(queue, { type: "exclusive", exclusivity_key: "repo" });
  assert.equal(q.type, "exclusive");
  assert.equal(q.exclusivity_key, "repo");
  await rejectsWith(client.enqueue(queue, "x"), { code: "INVALID_ARGUMENT" });
  await client.enqueue(queue, "a", { priority: 1, metadata: { repo: "web" } });
  await client.enqueue(queue, "b", { priority: 2, metadata: { repo: "web" } });
  await client.enqueue(queue, "c", { priority: 3, metadata: { repo: "api" } });
  const leased = await client.dequeue(queue, { max: 10 });
  assert.deepEqual(leased.map((m) => m.payload.toString()), ["a", "c"]);
  const c = await client.count(queue);
  assert.deepEqual([c.blocked, c.blocked_concurrency, c.blocked_rate], [1, 1, 0]);
  const page = await client.browse(queue);
  assert.equal((await client.explain(queue, page.messages[0].id)).reason, "exclusivity_held");
});

test("rates and bursts round-trip, throttle a key with explain's reason, and are checked", async () => {
  const queue = uniqueQueue("rated");
  const q = await client.createQueue(queue, { flow_key: "merchant", key_rate_per_s: 0.001, key_burst: 2, rate_per_s: 2.5, burst: 10 });
  assert.deepEqual([q.key_rate_per_s, q.key_burst, q.rate_per_s, q.burst], [0.001, 2, 2.5, 10]);
  // 0 must reach the server: it removes the queue's bucket.
  const u = await client.updateQueue(queue, { rate_per_s: 0 });
  assert.deepEqual([u.rate_per_s, u.burst, u.key_rate_per_s], [0, 10, 0.001]);
  for (const id of ["a1", "a2", "a3"]) await client.enqueue(queue, "x", { id, metadata: { merchant: "acme" } });
  const leased = await client.dequeue(queue, { max: 10 });
  assert.deepEqual(leased.map((m) => m.id).sort(), ["a1", "a2"]);
  const why = await client.explain(queue, "a3");
  assert.equal(why.reason, "key_rate");
  assert.equal(why.exclusivity_value, "acme");
  const c = await client.count(queue);
  assert.deepEqual([c.blocked, c.blocked_concurrency, c.blocked_rate], [1, 0, 1]);
  assert.ok(why.until > Date.now() + 900_000, `next token far away: ${why.until}`);
  await rejectsWith(client.updateQueue(queue, { key_rate_per_s: 0.0005 }), {
    code: "INVALID_ARGUMENT",
    origin: "server",
    message: /^key_rate_per_s: must be 0\.001-1000000 with at most 3 decimals$/,
  });
  await rejectsWith(client.updateQueue(queue, { rate_per_s: "fast" }), { code: "INVALID_ARGUMENT", origin: "local", message: /rate_per_s: must be a finite number/ });
  await rejectsWith(client.updateQueue(queue, { burst: 0 }), { code: "INVALID_ARGUMENT", origin: "server", message: /^burst: must be 1-1000000$/ });
});

test("fairness round-trips and the values take turns", async () => {
  const queue = uniqueQueue("fair");
  const q = await client.createQueue(queue, { flow_key: "tenant", fairness: "weighted", overdue_first_ms: 5000 });
  assert.deepEqual([q.fairness, q.overdue_first_ms], ["weighted", 5000]);
  // Priorities 0-100 are long overdue as deadlines: they would all jump the turns.
  await client.updateQueue(queue, { overdue_first_ms: 0 });
  for (let i = 0; i < 3; i++) await client.enqueue(queue, "x", { id: `big${i}`, priority: i, metadata: { tenant: "big" } });
  await client.enqueue(queue, "x", { id: "small0", priority: 100, metadata: { tenant: "small" } });
  assert.equal((await client.explain(queue, "small0")).reason, "fair_share");
  assert.deepEqual((await client.dequeue(queue, { max: 3 })).map((m) => m.id), ["big0", "small0", "big1"]);
  assert.equal((await client.updateQueue(queue, { fairness: "none", overdue_first_ms: 0 })).fairness, "none");
  await rejectsWith(client.updateQueue(queue, { fairness: "loud" }), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.createQueue(`${queue}-plain`, { fairness: "weighted" }), {
    code: "INVALID_ARGUMENT",
    origin: "server",
    message: /^fairness: needs a flow_key$/,
  });
});

test("key limits override one value, listKeys shows it, and bad input is refused", async () => {
  const queue = uniqueQueue("studios");
  await client.createQueue(queue, { flow_key: "studio", key_concurrency: 1 });
  for (const id of ["a0", "a1", "a2"]) await client.enqueue(queue, "x", { id, metadata: { studio: "acme" } });
  await client.enqueue(queue, "x", { id: "b0", metadata: { studio: "bolt" } });
  const k = await client.setKeyLimits(queue, "acme", { concurrency: 2, rate_per_s: 0.5, weight: 3 });
  assert.deepEqual([k.value, k.concurrency, k.rate_per_s, k.burst, k.weight], ["acme", 2, 0.5, 1, 3]);
  assert.deepEqual(k.overrides, { concurrency: 2, rate_per_s: 0.5, weight: 3 });
  assert.equal((await client.dequeue(queue, { max: 10 })).length, 2, "acme's one token, and bolt");
  const keys = await client.listKeys(queue);
  assert.deepEqual(keys.map((x) => x.value), ["acme", "bolt"]);
  assert.deepEqual([keys[0].pending, keys[0].running], [2, 1]);
  assert.ok(keys[0].next_token > 0);
  assert.deepEqual((await client.listKeys(queue, { order: "running", limit: 1 })).map((x) => x.value), ["acme"]);
  const back = await client.setKeyLimits(queue, "acme", {});
  assert.deepEqual([back.overrides, back.concurrency, back.held], [{}, 1, true]);
  assert.equal((await client.getKeyLimits(queue, "nobody")).pending, 0);
  await rejectsWith(client.setKeyLimits(queue, "acme", { weight: 0 }), { code: "INVALID_ARGUMENT", origin: "server", message: /^weight: must be 1-1000$/ });
  await rejectsWith(client.setKeyLimits(queue, "acme", { loudness: 3 }), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.listKeys(queue, { order: "loudest" }), { code: "INVALID_ARGUMENT", origin: "local" });
  await client.createQueue(`${queue}-plain`);
  await rejectsWith(client.listKeys(`${queue}-plain`), { code: "FAILED_PRECONDITION" });
});

test("flow_key and key_concurrency round-trip, with the server's rules and messages", async () => {
  const queue = uniqueQueue("keyed");
  const q = await client.createQueue(queue, { flow_key: "tenant", key_concurrency: 2 });
  assert.equal(q.flow_key, "tenant");
  assert.equal(q.key_concurrency, 2);
  assert.deepEqual(await client.createQueue(queue, { flow_key: "tenant", key_concurrency: 2 }), q);
  await rejectsWith(client.createQueue(queue, { flow_key: "region", key_concurrency: 2 }), { code: "ALREADY_EXISTS" });
  // 0 (no limit) must reach the server, like every other 0.
  assert.equal((await client.updateQueue(queue, { key_concurrency: 0 })).key_concurrency, 0);
  const got = await client.getQueue(queue);
  assert.equal(got.flow_key, "tenant");
  assert.equal(got.key_concurrency, 0);
  await rejectsWith(client.updateQueue(queue, { flow_key: "region" }), { code: "INVALID_ARGUMENT", origin: "local", message: /flow_key is fixed at creation/ });
  await rejectsWith(client.updateQueue(queue, { key_concurrency: 1_000_001 }), {
    code: "INVALID_ARGUMENT",
    origin: "server",
    message: /^key_concurrency: must be 0 \(no limit\) to 1000000$/,
  });
  await rejectsWith(client.createQueue(`${queue}-nokey`, { key_concurrency: 3 }), {
    code: "INVALID_ARGUMENT",
    origin: "server",
    message: /^key_concurrency: needs a flow_key$/,
  });
  await rejectsWith(client.createQueue(`${queue}-long`, { flow_key: "k".repeat(65) }), {
    code: "INVALID_ARGUMENT",
    origin: "server",
    message: /^flow_key: must be a metadata key of 1-64 bytes$/,
  });
  await rejectsWith(client.createQueue(`${queue}-ex`, { type: "exclusive", exclusivity_key: "repo", flow_key: "region" }), {
    code: "INVALID_ARGUMENT",
    message: /^flow_key: an exclusive queue's flow key is its exclusivity_key$/,
  });
  const ex = await client.createQueue(`${queue}-ex`, { type: "exclusive", exclusivity_key: "repo", flow_key: "repo", key_concurrency: 1 });
  assert.equal(ex.flow_key, "repo");
  assert.equal(ex.key_concurrency, 1);
  await rejectsWith(client.createQueue(`${queue}-neg`, { flow_key: "tenant", key_concurrency: -1 }), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("updateQueue changes settings, writes false and 0, and keeps type fixed", async () => {
  const queue = uniqueQueue("update");
  await client.createQueue(queue, { lease_ms: 1000, dequeue_paused: true, max_depth: 5 });
  // false and 0 must reach the server: flatc 2.0.8's TypeScript code would drop them.
  const q = await client.updateQueue(queue, { lease_ms: 2000, dequeue_paused: false, max_depth: 0 });
  assert.equal(q.lease_ms, 2000);
  assert.equal(q.dequeue_paused, false);
  assert.equal(q.max_depth, 0);
  await rejectsWith(client.updateQueue(queue, { type: "exclusive" }), { code: "INVALID_ARGUMENT", origin: "local", message: /fixed at creation/ });
  await rejectsWith(client.updateQueue(`${queue}-missing`, { lease_ms: 5 }), { code: "NOT_FOUND" });
});

test("getQueue, listQueues, purgeQueue and deleteQueue", async () => {
  const queue = uniqueQueue("lifecycle");
  await client.createQueue(queue);
  await client.enqueue(queue, "1");
  await client.enqueue(queue, "2");
  const names = (await client.listQueues()).map((q) => q.name);
  assert.ok(names.includes(queue));
  assert.deepEqual(names, [...names].sort());
  assert.equal((await client.getQueue(queue)).counts.pending, 2);
  assert.equal(await client.purgeQueue(queue, ["pending"]), 2);
  assert.equal(await client.purgeQueue(queue, "completed"), 0);
  assert.equal(await client.deleteQueue(queue), undefined);
  const e = await rejectsWith(client.getQueue(queue), { code: "NOT_FOUND" });
  assert.equal(e.message, "queue: no such queue");
  await rejectsWith(client.purgeQueue(queue, ["bogus"]), { code: "INVALID_ARGUMENT", origin: "local" });
});

// ---- Enqueue ---------------------------------------------------------------------------------

test("enqueue resolves with id, version and duplicate; reuse with other content is ALREADY_EXISTS", async () => {
  const queue = uniqueQueue("enqueue");
  const r = await client.enqueue(queue, Buffer.from("hello"), { priority: 7, metadata: { tenant: "acme" }, id: "m-1" });
  assert.deepEqual(r, { id: "m-1", version: 1, duplicate: false, error: null, outcome: null });
  const again = await client.enqueue(queue, "hello", { priority: 7, metadata: { tenant: "acme" }, id: "m-1" });
  assert.equal(again.duplicate, true);
  await rejectsWith(client.enqueue(queue, "other", { priority: 7, id: "m-1" }), { code: "ALREADY_EXISTS", origin: "server" });
  const generated = await client.enqueue(queue, "text payload");
  assert.equal(generated.id.length, 26);
  const m = await client.get(queue, generated.id);
  assert.ok(Buffer.isBuffer(m.payload));
  assert.equal(m.payload.toString(), "text payload");
  assert.equal(m.state, "pending");
  assert.equal(m.priority, 0);
  const first = await client.get(queue, "m-1");
  assert.equal(first.priority, 7);
  assert.deepEqual(first.metadata, { tenant: "acme" });
  assert.equal(first.version, 1);
  const bytes = await client.enqueue(queue, new Uint8Array([0, 255, 7]), { id: "bytes" });
  assert.deepEqual([...(await client.get(queue, bytes.id)).payload], [0, 255, 7]);
});

test("enqueue with delay_ms, visible_at (a bigint too) and max_attempts", async () => {
  const queue = uniqueQueue("delay");
  await client.enqueue(queue, "", { id: "later", delay_ms: 60000 });
  await client.enqueue(queue, "", { id: "at", visible_at: BigInt(nowMs() + 60000), max_attempts: 9 });
  const later = await client.get(queue, "later");
  const at = await client.get(queue, "at");
  assert.equal(later.state, "invisible");
  assert.equal(at.state, "invisible");
  assert.ok(later.visible_at > nowMs() + 50000);
  assert.equal(at.max_attempts, 9);
  await rejectsWith(client.enqueue(queue, "", { id: "both", delay_ms: 1, visible_at: 1 }), { code: "INVALID_ARGUMENT", origin: "local" });
  // delay_ms 0 is written (not dropped as a default): the message is pending at once even in a
  // queue whose default delay is long.
  const delayed = uniqueQueue("delayed-queue");
  await client.createQueue(delayed, { invisibility_ms: 60000 });
  await client.enqueue(delayed, "", { id: "now", delay_ms: 0 });
  assert.equal((await client.get(delayed, "now")).state, "pending");
});

test("enqueue checks argument types locally", async () => {
  const queue = uniqueQueue("types");
  for (const [options, field] of [
    [{ priority: "1" }, /priority/],
    [{ metadata: { k: 1 } }, /metadata/],
    [{ priority: 2 ** 60 }, /priority/],
    [{ priority: 1n << 63n }, /priority/],
    [{ delay_ms: 1.5 }, /delay_ms/],
    [{ colour: "red" }, /unknown option "colour"/],
  ]) {
    await rejectsWith(client.enqueue(queue, "x", options), { code: "INVALID_ARGUMENT", origin: "local", message: field });
  }
  await rejectsWith(client.enqueue(queue, 5), { code: "INVALID_ARGUMENT", origin: "local", message: /payload/ });
  await rejectsWith(client.enqueue(5, "x"), { code: "INVALID_ARGUMENT", origin: "local", message: /queue/ });
});

test("enqueueBatch splits into pipelined requests and answers per item", async () => {
  const queue = uniqueQueue("batch");
  await client.enqueue(queue, "taken", { id: "dup" });
  const items = Array.from({ length: 2500 }, (_, i) => ({ payload: String(i), priority: i }));
  items[1234] = { payload: "different", id: "dup" };
  const results = await client.enqueueBatch(queue, items);
  assert.equal(results.length, 2500);
  assert.equal(results[1234].error.code, "ALREADY_EXISTS");
  assert.ok(results[1234].error instanceof SundialError);
  assert.ok(results.every((r, k) => k === 1234 || r.error === null));
  assert.equal(new Set(results.map((r) => r.id)).size, 2500);
  assert.equal((await client.count(queue)).pending, 2500);
  await rejectsWith(client.enqueueBatch(queue, [{ payload: "x", colour: "red" }]), { code: "INVALID_ARGUMENT", message: /colour/ });
  assert.deepEqual(await client.enqueueBatch(queue, []), []);
});

test("a paused queue is FAILED_PRECONDITION and a full one RESOURCE_EXHAUSTED", async () => {
  const queue = uniqueQueue("limits");
  await client.createQueue(queue, { max_depth: 1 });
  await client.enqueue(queue);
  await rejectsWith(client.enqueue(queue), { code: "RESOURCE_EXHAUSTED", message: /max_depth/ });
  await client.updateQueue(queue, { enqueue_paused: true, max_depth: 0 });
  await rejectsWith(client.enqueue(queue), { code: "FAILED_PRECONDITION" });
});

test("relaxed durability per call and per client; a bad one is refused locally", async () => {
  const queue = uniqueQueue("relaxed");
  assert.equal((await client.enqueue(queue, "x", { durability: "relaxed" })).version, 1);
  const relaxed = new Client(server.addr, { durability: "relaxed" });
  await relaxed.enqueue(queue, "y");
  await relaxed.close();
  assert.equal((await client.count(queue)).pending, 2);
  await rejectsWith(client.enqueue(queue, "z", { durability: "sometimes" }), { code: "INVALID_ARGUMENT", origin: "local" });
});

// ---- Dequeue, complete, fail, extend -----------------------------------------------------------

test("dequeue leases earliest priority first, with the lease asked for", async () => {
  const queue = uniqueQueue("dequeue");
  await client.enqueueBatch(queue, [5, 1, 3, 1].map((p) => ({ payload: String(p), priority: p })));
  const leased = await client.dequeue(queue, { max: 3, lease_ms: 5000 });
  assert.deepEqual(leased.map((m) => m.priority), [1, 1, 3]);
  for (const m of leased) {
    assert.equal(m.state, "running");
    assert.equal(m.attempts, 1);
    assert.equal(m.queue, queue);
    assert.ok(m.lease_token > 0 && Number.isSafeInteger(m.lease_token));
    assert.equal(m.lease_expires_at - m.updated_at, 5000);
  }
  assert.equal((await client.dequeue(queue, { max: 5 }))[0].priority, 5);
  assert.deepEqual(await client.dequeue(queue), []);
});

test("dequeue with a filter, and its limits", async () => {
  const queue = uniqueQueue("filter");
  await client.enqueue(queue, "a", { metadata: { tenant: "acme", kind: "x" } });
  await client.enqueue(queue, "g", { metadata: { tenant: "globex" } });
  const got = await client.dequeue(queue, { max: 10, filter: { tenant: "globex" } });
  assert.deepEqual(got.map((m) => m.payload.toString()), ["g"]);
  assert.deepEqual(await client.dequeue(queue, { filter: new Map([["tenant", "acme"], ["kind", "y"]]) }), []);
  await rejectsWith(client.dequeue(queue, { filter: Object.fromEntries([0, 1, 2, 3, 4].map((i) => [`k${i}`, "v"])) }), {
    code: "INVALID_ARGUMENT",
    origin: "server",
    message: /filter/,
  });
  for (const options of [{ max: 0 }, { max: 1001 }, { wait_ms: 60001 }, { lease_ms: 0 }]) {
    await rejectsWith(client.dequeue(queue, options), { code: "INVALID_ARGUMENT" });
  }
  await rejectsWith(client.dequeue(queue, { leaseMs: 5 }), { code: "INVALID_ARGUMENT", origin: "local", message: /leaseMs/ });
});

test("a long poll is woken by an enqueue, and is empty when it runs out", async () => {
  const queue = uniqueQueue("longpoll");
  assert.deepEqual(await client.dequeue(queue, { wait_ms: 50 }), []);
  const poll = client.dequeue(queue, { wait_ms: 30000 });
  await client.stats(); // answered after the poll on the same connection: the server has it
  await client.enqueue(queue, "wake up");
  assert.deepEqual((await poll).map((m) => m.payload.toString()), ["wake up"]);
});

test("complete, its idempotent repeat, and its errors", async () => {
  const queue = uniqueQueue("complete");
  await client.enqueue(queue, "", { id: "a" });
  const [m] = await client.dequeue(queue);
  assert.equal(await client.complete(queue, m.id, m.lease_token), undefined);
  assert.equal(await client.complete(queue, m.id, BigInt(m.lease_token)), undefined); // idempotent
  assert.equal((await client.get(queue, "a")).state, "completed");
  await rejectsWith(client.complete(queue, m.id, m.lease_token + 1), { code: "FAILED_PRECONDITION", origin: "server" });
  await rejectsWith(client.complete(queue, "nope", 1), { code: "NOT_FOUND" });
  // A repeat that succeeded succeeds, and the first result stays (none here).
  assert.equal(await client.complete(queue, m.id, m.lease_token, { result: "42" }), undefined);
  assert.equal((await client.get(queue, "a")).result.length, 0);
  await rejectsWith(client.complete(queue, m.id, m.lease_token, { result: 42 }), { code: "INVALID_ARGUMENT", origin: "local", message: /payload/ });
});

test("completeBatch answers per item", async () => {
  const queue = uniqueQueue("complete-batch");
  await client.enqueueBatch(queue, [0, 1, 2].map((i) => ({ id: `m${i}` })));
  const leased = await client.dequeue(queue, { max: 3 });
  const items = leased.map((m) => ({ id: m.id, lease_token: m.lease_token }));
  items[1].lease_token += 1;
  items.push({ id: "ghost", lease_token: 5 });
  const results = await client.completeBatch(queue, items);
  assert.equal(results[0], null);
  assert.equal(results[2], null);
  assert.equal(results[1].code, "FAILED_PRECONDITION");
  assert.equal(results[3].code, "NOT_FOUND");
});

test("fail retries with the backoff, then dead-letters when attempts are spent", async () => {
  const queue = uniqueQueue("fail");
  const dlq = `${queue}.dlq`;
  await client.createQueue(dlq);
  await client.createQueue(queue, { max_attempts: 2, retry_backoff_ms: 60000, dead_letter_queue: dlq });
  await client.enqueue(queue, "", { id: "m" });
  let [m] = await client.dequeue(queue);
  let r = await client.fail(queue, m.id, m.lease_token, { error: "SMTP 451" });
  assert.equal(r.state, "invisible");
  assert.ok(r.visible_at >= nowMs() + 50000);
  const got = await client.get(queue, "m");
  assert.deepEqual([got.state, got.last_error, got.attempts], ["invisible", "SMTP 451", 1]);
  await client.reprioritize(queue, "m", { visible_at: 0 }); // due now (0 is written, not dropped)
  [m] = await waitFor(() => client.dequeue(queue).then((l) => (l.length ? l : null)), { message: "the message due again" });
  r = await client.fail(queue, m.id, m.lease_token, { error: "again", retry_delay_ms: 0 });
  assert.deepEqual(r, { state: "errored", visible_at: 0, dead_letter_queue: dlq });
  const moved = await client.get(dlq, "m");
  assert.equal(moved.state, "pending");
  assert.equal(moved.metadata["x-origin-queue"], queue);
  const e = await rejectsWith(client.fail(queue, m.id, m.lease_token), {});
  assert.ok(["FAILED_PRECONDITION", "NOT_FOUND"].includes(e.code));
});

test("fail with retry_delay_ms 0 makes the message pending at once, despite a long backoff", async () => {
  const queue = uniqueQueue("fail-now");
  await client.createQueue(queue, { retry_backoff_ms: 600000, retry_backoff_max_ms: 600000 });
  await client.enqueue(queue, "", { id: "m" });
  const [m] = await client.dequeue(queue);
  assert.equal((await client.fail(queue, m.id, m.lease_token, { retry_delay_ms: 0 })).state, "pending");
  const [again] = await client.dequeue(queue);
  assert.equal(again.attempts, 2);
  assert.notEqual(again.lease_token, m.lease_token);
});

test("extend moves the expiry and refuses a stale token", async () => {
  const queue = uniqueQueue("extend");
  await client.enqueue(queue, "", { id: "m" });
  const [m] = await client.dequeue(queue, { lease_ms: 1000 });
  const expires = await client.extend(queue, m.id, m.lease_token, 60000);
  assert.ok(expires >= m.lease_expires_at + 50000);
  assert.equal((await client.get(queue, "m")).lease_expires_at, expires);
  await rejectsWith(client.extend(queue, m.id, m.lease_token + 1, 1000), { code: "FAILED_PRECONDITION" });
});

test("an expired lease makes the message pending again and its token stale", async () => {
  const queue = uniqueQueue("expiry");
  await client.enqueue(queue, "", { id: "m" });
  const [m] = await client.dequeue(queue, { lease_ms: 50 });
  const [again] = await client.dequeue(queue, { wait_ms: 10000 });
  assert.equal(again.attempts, 2);
  await rejectsWith(client.complete(queue, m.id, m.lease_token), { code: "FAILED_PRECONDITION" });
});

// ---- Cancel, reprioritize, redrive, get, browse, count, explain --------------------------------

test("cancel by one id, a list of ids and a filter", async () => {
  const queue = uniqueQueue("cancel");
  await client.enqueueBatch(queue, [{ id: "a" }, { id: "b", metadata: { t: "x" } }, { id: "c", metadata: { t: "x" } }]);
  const results = await client.cancel(queue, ["a", "ghost"]);
  assert.equal(results[0], null);
  assert.equal(results[1].code, "NOT_FOUND");
  await rejectsWith(client.cancel(queue, "ghost"), { code: "NOT_FOUND" });
  assert.equal(await client.cancel(queue, { filter: { t: "x" } }), 2);
  assert.equal((await client.count(queue)).canceled, 3);
  await rejectsWith(client.cancel(queue, {}), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("reprioritize by id and by filter; priority 0 is written", async () => {
  const queue = uniqueQueue("reprioritize");
  await client.enqueueBatch(queue, [{ id: "a", priority: 5 }, { id: "b", priority: 6, metadata: { t: "x" } }]);
  assert.equal(await client.reprioritize(queue, "b", { priority: 0 }), 2);
  assert.equal((await client.get(queue, "b")).priority, 0);
  assert.equal((await client.dequeue(queue))[0].id, "b");
  assert.equal(await client.reprioritize(queue, { filter: { t: "nobody" } }, { priority: 0 }), 0);
  await rejectsWith(client.reprioritize(queue, "b", { priority: 1 }), { code: "FAILED_PRECONDITION" }); // running now
});

test("redrive by ids, all and filter", async () => {
  const queue = uniqueQueue("redrive");
  await client.createQueue(queue, { max_attempts: 1 });
  await client.enqueueBatch(queue, ["a", "b", "c"].map((id) => ({ id, metadata: { t: id } })));
  for (const m of await client.dequeue(queue, { max: 3 })) await client.fail(queue, m.id, m.lease_token, { error: "no" });
  assert.equal((await client.count(queue)).errored, 3);
  assert.deepEqual(await client.redrive(queue, ["a"]), [null]);
  assert.equal(await client.redrive(queue, { filter: { t: "b" } }), 1);
  assert.equal(await client.redrive(queue, { all: true }), 1);
  assert.equal((await client.count(queue)).pending, 3);
  await rejectsWith(client.redrive(queue, "a"), { code: "FAILED_PRECONDITION" });
});

test("get of an unknown message is NOT_FOUND, typed and printable", async () => {
  const queue = uniqueQueue("get");
  await client.createQueue(queue);
  const e = await rejectsWith(client.get(queue, "nope"), { code: "NOT_FOUND", origin: "server" });
  assert.equal(e.message, "id: no such message");
  assert.equal(String(e), "SundialError: NOT_FOUND: id: no such message");
  assert.ok(e instanceof Error);
});

test("browse pages in dequeue order, with a filter", async () => {
  const queue = uniqueQueue("browse");
  await client.enqueueBatch(queue, [0, 1, 2, 3, 4, 5, 6].map((p) => ({ id: `m${p}`, priority: p, metadata: { even: String(p % 2 === 0) } })));
  const seen = [];
  let cursor;
  for (;;) {
    const page = await client.browse(queue, { state: "pending", limit: 3, cursor });
    seen.push(...page.messages.map((m) => m.id));
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6].map((p) => `m${p}`));
  const evens = await client.browse(queue, { filter: { even: "true" } });
  assert.deepEqual(evens.messages.map((m) => m.id), ["m0", "m2", "m4", "m6"]);
  assert.equal(evens.messages[0].state, "pending");
  assert.equal(evens.messages[0].version, 1);
  await rejectsWith(client.browse(queue, { cursor: "not-a-cursor" }), { code: "INVALID_ARGUMENT", origin: "server" });
  await rejectsWith(client.browse(queue, { state: "gone" }), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("count with and without a filter", async () => {
  const queue = uniqueQueue("count");
  await client.enqueueBatch(queue, [{ metadata: { t: "a" } }, { metadata: { t: "b" } }, { metadata: { t: "a" }, delay_ms: 60000 }]);
  const c = await client.count(queue);
  assert.deepEqual([c.pending, c.invisible, c.running], [2, 1, 0]);
  assert.deepEqual(await client.count(queue, { filter: { t: "a" } }), {
    invisible: 1,
    pending: 1,
    running: 0,
    completed: 0,
    canceled: 0,
    errored: 0,
    waiting: 0,
    blocked: 0,
    blocked_concurrency: 0,
    blocked_rate: 0,
  });
});

test("explain by id and by filter", async () => {
  const queue = uniqueQueue("explain");
  await client.enqueue(queue, "", { id: "later", delay_ms: 60000, metadata: { t: "a" } });
  const e = await client.explain(queue, "later");
  assert.deepEqual([e.reason, e.id, e.state], ["invisible", "later", "invisible"]);
  assert.ok(e.until > nowMs());
  assert.equal((await client.explain(queue, { filter: { t: "zzz" } })).reason, "no_match");
  await rejectsWith(client.explain(queue, {}), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("stats and health", async () => {
  await client.enqueue(uniqueQueue("stats"));
  const s = await client.stats();
  assert.ok(s.queues >= 1 && s.messages.pending >= 1 && s.connections >= 1);
  assert.ok(s.wal_durable_lsn > 0);
  assert.equal(s.wal_failed, false);
  assert.deepEqual(await client.health(), { live: true, ready: true, reason: "" });
});

// ---- Pipelining --------------------------------------------------------------------------------

test("many calls in flight at once share one connection", async () => {
  const queue = uniqueQueue("pipeline");
  const before = (await client.stats()).connections;
  const results = await Promise.all(Array.from({ length: 800 }, (_, i) => client.enqueue(queue, String(i), { id: `m${i}` })));
  assert.deepEqual(results.map((r) => r.id), Array.from({ length: 800 }, (_, i) => `m${i}`));
  assert.equal((await client.count(queue)).pending, 800);
  assert.equal((await client.stats()).connections, before);
});

test("replies come out of order: a long poll in flight holds back none of the calls behind it", async () => {
  const queue = uniqueQueue("out-of-order");
  await client.createQueue(queue);
  let polled = null;
  const poll = client.dequeue(queue, { wait_ms: 30000 }).then((messages) => {
    polled = messages;
    return messages;
  });
  // Sent after the poll on the same connection, answered before it.
  for (let i = 0; i < 20; i++) {
    await client.enqueue(`${queue}-other`, "x");
    await client.getQueue(queue);
  }
  const [stats, counts] = await Promise.all([client.stats(), client.count(queue)]);
  assert.ok(stats.connections >= 1);
  assert.equal(counts.pending, 0);
  assert.equal(polled, null, "the poll is still waiting");
  await client.enqueue(queue, "now");
  assert.deepEqual((await poll).map((m) => m.payload.toString()), ["now"]);
});

// ---- Deadlines and unreadable replies ------------------------------------------------------------

/** A listener that answers each request frame with `reply(frame)` (null: no answer). */
function fakeServer(reply) {
  const sockets = new Set();
  const listener = net.createServer((socket) => {
    sockets.add(socket);
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32LE(0)) {
        const length = buffered.readUInt32LE(0);
        const out = reply(buffered.subarray(4, 4 + length));
        buffered = buffered.subarray(4 + length);
        if (out !== null) socket.write(out);
      }
    });
    socket.on("error", () => undefined);
  });
  return new Promise((resolve) => {
    listener.listen(0, "127.0.0.1", () =>
      resolve({
        addr: `127.0.0.1:${listener.address().port}`,
        close: () => {
          for (const s of sockets) s.destroy();
          listener.close();
        },
      }),
    );
  });
}

test("an unreachable server is UNAVAILABLE after the deadline", async () => {
  const listener = net.createServer();
  await new Promise((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const port = listener.address().port;
  await new Promise((resolve) => listener.close(resolve)); // nothing listens there now
  const c = new Client(`127.0.0.1:${port}`, { timeout_ms: 300 });
  await rejectsWith(c.stats(), { code: "UNAVAILABLE", origin: "connection", message: /cannot connect/ });
});

test("no reply within the deadline is UNAVAILABLE and the connection stays open", async () => {
  const fake = await fakeServer(() => null);
  try {
    const c = new Client(fake.addr, { timeout_ms: 200 });
    await rejectsWith(c.stats(), { code: "UNAVAILABLE", origin: "connection", message: /no reply/ });
    assert.equal(c.connected, true);
    await c.close();
  } finally {
    fake.close();
  }
});

test("an unreadable reply is INTERNAL and closes the connection", async () => {
  const fake = await fakeServer(() => Buffer.concat([Buffer.from([8, 0, 0, 0]), Buffer.alloc(8, 0xff)]));
  try {
    const c = new Client(fake.addr, { timeout_ms: 5000 });
    await rejectsWith(c.stats(), { code: "INTERNAL", origin: "connection" });
    await waitFor(() => !c.connected, { message: "the connection closed" });
  } finally {
    fake.close();
  }
});

test("a closed client refuses calls", async () => {
  const c = new Client(server.addr);
  await c.stats();
  await c.close();
  await rejectsWith(c.stats(), { code: "UNAVAILABLE", message: /closed/ });
});

test("bad constructor arguments throw INVALID_ARGUMENT at once", () => {
  for (const [addr, options] of [
    ["host:0", {}],
    ["host:70000", {}],
    ["::1", {}],
    ["[::1", {}],
    [5, {}],
    [[], {}],
    ["127.0.0.1:7400", { timeoutMs: 5 }],
    ["127.0.0.1:7400", { timeout_ms: -1 }],
    ["127.0.0.1:7400", { tls: true, ca_file: "/does/not/exist.pem" }],
    ["127.0.0.1:7400", { ca_file: "/etc/hosts" }],
  ]) {
    assert.throws(
      () => new Client(addr, options),
      (e) => e instanceof SundialError && e.code === "INVALID_ARGUMENT" && e.origin === "local",
      JSON.stringify([addr, options]),
    );
  }
  assert.deepEqual(new Client(["a:1", "[::1]:2", "c"]).addresses, ["a:1", "[::1]:2", "c:7400"]);
  assert.deepEqual(new Client("a:1,b:2").addresses, ["a:1", "b:2"]);
  assert.equal(new Client(":9000").address, "127.0.0.1:9000");
});
