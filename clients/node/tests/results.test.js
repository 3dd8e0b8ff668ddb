// Results, wait, call and complete-and-next against a real sundiald: a complete's result read back
// by get and wait, enqueue with wait_ms and call() (request and response in one round trip),
// completeAndNext / failAndNext, and the Worker sending its handler's return value as the result
// and asking for its next messages in the complete.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { SundialError } = require("sundial-client");
const {
  answeredRequests,
  rejectsWith,
  startWorker: startServerWorker,
  stopWorker,
  uniqueQueue,
  useServer,
  waitFor,
} = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

const startWorker = (queue, handler, options) => startServerWorker(server.addr, queue, handler, options);
const stop = stopWorker;
const requests = (op) => answeredRequests(server.httpAddr, op);

test("a complete's result is read back by get and wait; the first result stays", async () => {
  const queue = uniqueQueue("result");
  await client.enqueue(queue, "in", { id: "a" });
  const [m] = await client.dequeue(queue);
  await client.complete(queue, m.id, m.lease_token, { result: Buffer.from([0, 1, 2, 255]) });
  await client.complete(queue, m.id, m.lease_token, { result: "other" }); // a repeat: succeeds, changes nothing
  const got = await client.get(queue, "a");
  assert.equal(got.state, "completed");
  assert.deepEqual([...got.result], [0, 1, 2, 255]);
  const [outcome, missing] = await client.wait(queue, ["a", "ghost"]);
  assert.equal(outcome.id, "a");
  assert.equal(outcome.state, "completed");
  assert.equal(outcome.done, true);
  assert.equal(outcome.error, null);
  assert.deepEqual([...outcome.result], [0, 1, 2, 255]);
  assert.ok(missing.error instanceof SundialError);
  assert.equal(missing.error.code, "NOT_FOUND");
  assert.equal(missing.done, false);
});

test("wait with wait_ms is answered by the completion, and with what is terminal when it runs out", async () => {
  const queue = uniqueQueue("wait");
  await client.enqueueBatch(queue, [{ id: "a" }, { id: "b" }]);
  const [m] = await client.dequeue(queue);
  // Nothing completes: answered when wait_ms runs out, nothing done.
  const early = await client.wait(queue, ["a"], { wait_ms: 50 });
  assert.equal(early[0].done, false);
  assert.equal(early[0].state, "running");
  const waiting = client.wait(queue, [m.id], { wait_ms: 30_000 });
  await client.stats(); // answered after the wait on the same connection: the server holds it
  await client.complete(queue, m.id, m.lease_token, { result: "done" });
  const [outcome] = await waiting;
  assert.equal(outcome.done, true);
  assert.equal(outcome.result.toString(), "done");
  await rejectsWith(client.wait(queue, []), { code: "INVALID_ARGUMENT", origin: "local" });
  await rejectsWith(client.wait(queue, ["a"], { wait_ms: 60_001 }), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("call() is request and response in one round trip: the worker's return value comes back", async () => {
  const queue = uniqueQueue("call");
  const w = startWorker(queue, (message) => ({ upper: message.payload.toString().toUpperCase() }), { concurrency: 2 });
  const outcome = await client.call(queue, "hello", { timeout_ms: 20_000 });
  assert.equal(outcome.state, "completed");
  assert.equal(outcome.done, true);
  assert.deepEqual(JSON.parse(outcome.result.toString()), { upper: "HELLO" });
  // enqueue with wait_ms: the same, as the EnqueueResult's outcome.
  const r = await client.enqueue(queue, "again", { wait_ms: 20_000, id: "e1" });
  assert.equal(r.id, "e1");
  assert.deepEqual(JSON.parse(r.outcome.result.toString()), { upper: "AGAIN" });
  await stop(w);
  // No worker: answered when the time runs out, not done; the message runs on.
  const late = await client.call(queue, "nobody", { timeout_ms: 100 });
  assert.equal(late.done, false);
  assert.equal(late.state, "pending");
  await rejectsWith(client.call(queue, "x", { timeout_ms: 60_001 }), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("completeAndNext completes and leases in one request; a stale token does not cost the next lease", async () => {
  const queue = uniqueQueue("next");
  await client.enqueueBatch(queue, ["a", "b", "c", "d"].map((id, i) => ({ id, priority: i })));
  const [a] = await client.dequeue(queue);
  const before = await requests("dequeue");
  const r = await client.completeAndNext(queue, [{ id: a.id, lease_token: a.lease_token, result: "ra" }], { max: 2 });
  assert.deepEqual(r.errors, [null]);
  assert.equal(r.next_error, null);
  assert.deepEqual(r.next.map((m) => [m.id, m.state]), [["b", "running"], ["c", "running"]]);
  assert.equal((await client.get(queue, "a")).result.toString(), "ra");
  assert.equal(await requests("dequeue"), before); // the leases came with the complete
  // A stale token is that item's error; the dequeue still runs.
  const stale = await client.completeAndNext(queue, [{ id: "b", lease_token: r.next[0].lease_token + 1 }]);
  assert.equal(stale.errors[0].code, "FAILED_PRECONDITION");
  assert.deepEqual(stale.next.map((m) => m.id), ["d"]);
  // Another queue that does not exist: next_error, the completion stands.
  const other = await client.completeAndNext(queue, [{ id: "b", lease_token: r.next[0].lease_token }], { queue: uniqueQueue("none") });
  assert.deepEqual(other.errors, [null]);
  assert.equal(other.next_error.code, "NOT_FOUND");
  assert.equal((await client.get(queue, "b")).state, "completed");
  // Nothing to lease, with a wait: answered empty when it runs out, the completion acknowledged.
  const c = r.next[1];
  const empty = await client.completeAndNext(queue, [{ id: c.id, lease_token: c.lease_token }], { wait_ms: 50 });
  assert.deepEqual(empty.next, []);
  assert.equal((await client.get(queue, "c")).state, "completed");
  await rejectsWith(client.completeAndNext(queue, [], { max: 1, bogus: 1 }), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("failAndNext fails and leases in one request; a refused fail leases nothing", async () => {
  const queue = uniqueQueue("fail-next");
  await client.createQueue(queue, { retry_backoff_ms: 60_000 });
  await client.enqueueBatch(queue, [{ id: "a", priority: 1 }, { id: "b", priority: 2 }]);
  const [a] = await client.dequeue(queue);
  const r = await client.failAndNext(queue, a.id, a.lease_token, {}, { error: "boom" });
  assert.equal(r.fail.state, "invisible");
  assert.deepEqual(r.next.map((m) => m.id), ["b"]);
  await rejectsWith(client.failAndNext(queue, a.id, a.lease_token, {}), { code: "FAILED_PRECONDITION", origin: "server" });
  assert.equal((await client.get(queue, "b")).state, "running");
});

test("the Worker sends its handler's return value as the result: bytes, text, JSON, or none", async () => {
  const queue = uniqueQueue("worker-results");
  await client.createQueue(queue, { max_attempts: 1 });
  const values = { bytes: Buffer.from([7, 8]), text: "plain", json: { n: 1, list: [true] }, none: undefined, bad: 10n };
  await client.enqueueBatch(queue, Object.keys(values).map((id) => ({ id })));
  const w = startWorker(queue, (message) => values[message.id]);
  await waitFor(async () => {
    const c = await client.count(queue);
    return c.completed === 4 && c.errored === 1;
  }, { message: "four completed, one errored" });
  await stop(w);
  assert.deepEqual([...(await client.get(queue, "bytes")).result], [7, 8]);
  assert.equal((await client.get(queue, "text")).result.toString(), "plain");
  assert.deepEqual(JSON.parse((await client.get(queue, "json")).result.toString()), { n: 1, list: [true] });
  assert.equal((await client.get(queue, "none")).result.length, 0);
  const bad = await client.get(queue, "bad");
  assert.equal(bad.state, "errored");
  assert.match(bad.last_error, /^result: .*BigInt/);
});

test("a busy Worker's loop is one request per job: its completes carry the next lease", async () => {
  const queue = uniqueQueue("worker-next");
  await client.enqueueBatch(queue, Array.from({ length: 50 }, (_, i) => ({ id: `m${i}`, priority: i })));
  const dequeues = await requests("dequeue");
  const completes = await requests("complete");
  const order = [];
  const w = startWorker(queue, (message) => {
    order.push(message.id);
  }, { concurrency: 1 });
  // Every complete answered (the last one's empty `next` sent a long poll, which is not answered).
  await waitFor(() => w.metrics().sundial_worker_completed_total === 50, { message: "50 completed" });
  // One dequeue for the first message; the other 49 leases came with the 50 completes.
  assert.equal((await requests("dequeue")) - dequeues, 1);
  assert.equal((await requests("complete")) - completes, 50);
  await stop(w);
  assert.deepEqual(order, Array.from({ length: 50 }, (_, i) => `m${i}`)); // still in priority order
  assert.equal(w.metrics().sundial_worker_leased_total, 50);
  assert.equal(w.metrics().sundial_worker_completed_total, 50);
});
