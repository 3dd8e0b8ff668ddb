// Worker against a real sundiald: concurrency, outcomes, retries by the server's backoff, lease
// extension and loss, shutdown (stop(), a handler that never returns, prefetched messages given
// back), and a server killed under it.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { Client, SundialError, Worker, errorText } = require("sundial-client");
const { answeredRequests, delay, rejectsWith, Server, startWorker, stopWorker, uniqueQueue, useServer, waitFor } = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

/** A promise and its resolve, for handlers that wait until the test lets them go. */
function gate() {
  let open;
  const promise = new Promise((resolve) => (open = resolve));
  return { promise, open };
}

const stop = stopWorker;

test("runs at most `concurrency` handlers and leases no more", async () => {
  const queue = uniqueQueue("concurrency");
  const release = gate();
  let running = 0;
  let peak = 0;
  await client.enqueueBatch(queue, Array.from({ length: 10 }, (_, i) => ({ payload: String(i) })));
  const w = startWorker(server.addr, queue, async () => {
    running++;
    peak = Math.max(peak, running);
    await release.promise;
    running--;
  }, { concurrency: 4 });
  await waitFor(() => running === 4, { message: "4 handlers running" });
  assert.equal((await client.count(queue)).running, 4); // nothing leased to wait behind them
  release.open();
  await waitFor(async () => (await client.count(queue)).completed === 10, { message: "10 completed" });
  await stop(w);
  assert.equal(peak, 4);
  const m = w.metrics();
  assert.equal(m.sundial_worker_leased_total, 10);
  assert.equal(m.sundial_worker_completed_total, 10);
  assert.equal(m.sundial_worker_running, 0);
});

const completeRequests = () => answeredRequests(server.httpAddr, "complete");

test("completes are batched: fewer complete requests than jobs", async () => {
  const queue = uniqueQueue("batched");
  await client.enqueueBatch(queue, Array.from({ length: 200 }, (_, i) => ({ payload: String(i) })));
  const before = await completeRequests();
  const w = startWorker(server.addr, queue, () => undefined, { concurrency: 8 });
  await waitFor(async () => (await client.count(queue)).completed === 200, { message: "200 completed" });
  await stop(w);
  const requests = (await completeRequests()) - before;
  assert.equal(w.metrics().sundial_worker_completed_total, 200);
  // The first dequeue brings 8: two completes go alone, the other six in one request.
  assert.ok(requests < 200, `${requests} complete requests for 200 jobs`);
});

test("a handler that throws fails the message with the error's text; the server's backoff brings it back", async () => {
  const queue = uniqueQueue("throws");
  await client.createQueue(queue, { retry_backoff_ms: 200, max_attempts: 5 });
  await client.enqueue(queue, "job", { id: "m" });
  const seen = [];
  const errors = [];
  const w = startWorker(server.addr, queue, async (message) => {
    seen.push([message.attempts, performance.now()]);
    if (message.attempts < 3) throw new Error(`try ${message.attempts}`);
    return { sent: true }; // a result: kept for when the protocol carries one
  }, { on_error: (m, e) => errors.push([m.attempts, e.message]) });
  await waitFor(async () => (await client.get(queue, "m")).state === "completed", { message: "completed" });
  await stop(w);
  assert.deepEqual(seen.map(([a]) => a), [1, 2, 3]);
  // Backoff 200 ms · 2^(attempts−1), ±10%, never early (less 10 ms: the server's whole ms).
  assert.ok(seen[1][1] - seen[0][1] >= 170, `${seen[1][1] - seen[0][1]} ms`);
  assert.ok(seen[2][1] - seen[1][1] >= 350, `${seen[2][1] - seen[1][1]} ms`);
  assert.deepEqual(errors, [[1, "try 1"], [2, "try 2"]]);
  const m = await client.get(queue, "m");
  assert.equal(m.attempts, 3);
  assert.equal(m.last_error, "Error: try 2");
  assert.equal(w.metrics().sundial_worker_failed_total, 2);
  assert.equal(w.metrics().sundial_worker_completed_total, 1);
});

test("a synchronous handler works, and a thrown non-Error is its own text", async () => {
  const queue = uniqueQueue("sync");
  await client.createQueue(queue, { max_attempts: 1 });
  await client.enqueueBatch(queue, [{ id: "ok" }, { id: "bad" }]);
  const w = startWorker(server.addr, queue, (message) => {
    if (message.id === "bad") throw "oops"; // eslint-disable-line no-throw-literal
  });
  await waitFor(async () => {
    const c = await client.count(queue);
    return c.completed === 1 && c.errored === 1;
  }, { message: "one completed, one errored" });
  await stop(w);
  assert.equal((await client.get(queue, "bad")).last_error, "oops");
});

test("spent attempts move the message to the dead-letter queue with the last error", async () => {
  const queue = uniqueQueue("poison");
  const dlq = `${queue}.dlq`;
  await client.createQueue(dlq);
  await client.createQueue(queue, { max_attempts: 2, retry_backoff_ms: 1, dead_letter_queue: dlq });
  await client.enqueue(queue, "poison", { id: "p" });
  const w = startWorker(server.addr, queue, async (message) => {
    throw new TypeError(`cannot parse ${message.payload}`);
  });
  await waitFor(async () => (await client.count(dlq)).pending === 1, { message: "dead-lettered" });
  await stop(w);
  const moved = await client.get(dlq, "p");
  assert.equal(moved.last_error, "TypeError: cannot parse poison");
  assert.equal(moved.metadata["x-origin-queue"], queue);
});

test("the lease is extended at half-life while a long handler runs", async () => {
  const queue = uniqueQueue("extend");
  await client.createQueue(queue, { lease_ms: 1500 });
  await client.enqueue(queue, "slow", { id: "s" });
  const w = startWorker(server.addr, queue, () => delay(4500)); // the work itself: three leases long
  await waitFor(async () => (await client.get(queue, "s")).state === "completed", { timeout: 30_000, message: "completed" });
  await stop(w);
  assert.equal((await client.get(queue, "s")).attempts, 1);
  assert.ok(w.metrics().sundial_worker_extended_total >= 4, JSON.stringify(w.metrics())); // every 0.75 s
  assert.equal(w.metrics().sundial_worker_lease_lost_total, 0);
});

test("a lost lease is reported and the handler's outcome is not sent", async () => {
  const queue = uniqueQueue("lost");
  await client.createQueue(queue, { lease_ms: 1000 });
  await client.enqueue(queue, "", { id: "c" });
  const started = gate();
  const release = gate();
  const lost = [];
  const w = startWorker(server.addr, queue, async () => {
    started.open();
    await release.promise;
  }, { on_lease_lost: (m) => lost.push(m.id) });
  await started.promise;
  assert.deepEqual(await client.cancel(queue, ["c"]), [null]); // the lease's token is stale now
  await waitFor(() => lost.length > 0, { message: "the lease keeper noticing" });
  release.open();
  await waitFor(() => w.metrics().sundial_worker_running === 0);
  await stop(w);
  assert.deepEqual(lost, ["c"]);
  assert.equal((await client.get(queue, "c")).state, "canceled");
  assert.equal(w.metrics().sundial_worker_lease_lost_total, 1);
  assert.equal(w.metrics().sundial_worker_completed_total, 0);
});

test("stop() lets running handlers finish and completes them; nothing more is fetched", async () => {
  const queue = uniqueQueue("stop");
  await client.createQueue(queue, { lease_ms: 5000 });
  await client.enqueueBatch(queue, [{ id: "a", priority: 1 }, { id: "b", priority: 2 }]);
  const started = gate();
  const release = gate();
  const w = startWorker(server.addr, queue, async () => {
    started.open();
    await release.promise;
  }, { concurrency: 1, shutdown_timeout_ms: 30_000 });
  await started.promise;
  w.stop();
  await waitFor(() => !w.fetchClient.connected, { message: "fetching stopped" });
  let finished = false;
  w.done.then(() => (finished = true));
  await delay(0);
  assert.equal(finished, false); // waiting for the handler
  release.open();
  await w.done;
  assert.equal((await client.get(queue, "a")).state, "completed");
  const b = await client.get(queue, "b");
  assert.deepEqual([b.state, b.attempts], ["pending", 0]); // never fetched after stop()
});

test("a handler that never returns is left to its lease after the shutdown timeout", async () => {
  const queue = uniqueQueue("hang");
  await client.createQueue(queue, { lease_ms: 1000 });
  await client.enqueue(queue, "", { id: "h" });
  const started = gate();
  const release = gate();
  let returned = false;
  const w = startWorker(server.addr, queue, async () => {
    started.open();
    await release.promise;
    returned = true;
  }, { shutdown_timeout_ms: 300 });
  await started.promise;
  await stop(w); // resolves after the timeout though the handler still runs
  assert.equal(w.metrics().sundial_worker_abandoned_total, 1);
  assert.equal(returned, false);
  // No more extends: the lease runs out and the message is pending again.
  await waitFor(async () => (await client.get(queue, "h")).state === "pending", { message: "lease expiry" });
  release.open();
  await waitFor(() => returned);
  const m = await client.get(queue, "h");
  assert.deepEqual([m.state, m.attempts], ["pending", 1]); // its late outcome was not sent
});

test("prefetch leases more than it runs, and gives the waiting ones back at stop()", async () => {
  const queue = uniqueQueue("prefetch");
  await client.createQueue(queue, { lease_ms: 30000 });
  await client.enqueueBatch(queue, Array.from({ length: 10 }, (_, i) => ({ id: `m${i}`, priority: i })));
  const started = [];
  const release = gate();
  const w = startWorker(server.addr, queue, async (message) => {
    started.push(message.id);
    await release.promise;
  }, { concurrency: 2, prefetch: 3 });
  await waitFor(async () => started.length === 2 && (await client.count(queue)).running === 5, {
    message: "2 running and 3 prefetched",
  });
  w.stop();
  // The 3 waiting are given back now, long before their 30 s lease would end.
  await waitFor(async () => (await client.count(queue)).pending === 8, { message: "prefetched given back" });
  release.open();
  await w.done;
  assert.deepEqual([...started].sort(), ["m0", "m1"]);
  assert.equal((await client.count(queue)).completed, 2);
  assert.equal(w.metrics().sundial_worker_released_total, 3);
  const back = await client.get(queue, "m2");
  assert.deepEqual([back.state, back.attempts], ["pending", 1]);
});

test("stop() drops a waiting long poll, so nothing is leased for it", async () => {
  const queue = uniqueQueue("poll");
  await client.createQueue(queue);
  const w = startWorker(server.addr, queue, () => undefined, { poll_ms: 60_000 });
  await waitFor(() => w.fetchesInFlight === 1, { message: "a long poll sent" });
  // The server runs a connection's requests in order: once a request sent after the poll is
  // answered on the same connection, the poll is waiting there.
  await w.fetchClient.stats();
  await stop(w); // resolves without waiting out the 60 s poll
  await client.enqueue(queue, "", { id: "after" });
  const m = await client.get(queue, "after");
  assert.deepEqual([m.state, m.attempts], ["pending", 0]);
  assert.equal((await client.dequeue(queue))[0].id, "after");
});

test("a filter the server refuses stops run() with its error", async () => {
  const queue = uniqueQueue("bad-filter");
  const filter = Object.fromEntries([0, 1, 2, 3, 4].map((i) => [`k${i}`, "v"]));
  const w = new Worker(server.addr, queue, () => undefined, { filter, handle_signals: false, logger: null });
  await rejectsWith(w.run(), { code: "INVALID_ARGUMENT", origin: "server", message: /filter/ });
});

test("bad arguments throw in the constructor", () => {
  for (const [queue, handler, options] of [
    ["q", "not a function", {}],
    ["q", () => undefined, { concurrency: 0 }],
    ["q", () => undefined, { concurrency: 1.5 }],
    ["q", () => undefined, { lease_ms: "long" }],
    ["q", () => undefined, { shutdownTimeoutMs: 5 }],
    [5, () => undefined, {}],
  ]) {
    assert.throws(() => new Worker(server.addr, queue, handler, options), (e) => e instanceof SundialError && e.code === "INVALID_ARGUMENT");
  }
});

test("errorText is Name: message, cut to 1 KiB on a character boundary", () => {
  assert.equal(errorText(new RangeError("x")), "RangeError: x");
  assert.equal(errorText("plain"), "plain");
  const long = errorText(new Error("é".repeat(1000)));
  assert.ok(Buffer.byteLength(long) <= 1024);
  assert.ok(!long.includes("\ufffd"));
});

test("the worker survives a server killed under it", async () => {
  const own = await new Server({ fixedPort: true }).start();
  const queue = uniqueQueue("killed");
  const c = new Client(own.addr, { timeout_ms: 30_000 });
  try {
    await c.createQueue(queue, { lease_ms: 1000 });
    await c.enqueueBatch(queue, Array.from({ length: 50 }, (_, i) => ({ id: `a${i}` })));
    const done = new Set();
    const w = startWorker(own.addr, queue, (message) => {
      done.add(message.id);
    }, { concurrency: 4 });
    await waitFor(async () => (await c.count(queue)).completed >= 10, { message: "10 completed" });
    await own.stop();
    await own.restart();
    await c.enqueueBatch(queue, Array.from({ length: 50 }, (_, i) => ({ id: `b${i}` })));
    // Leases lost with the server come back when they expire; everything ends completed.
    await waitFor(async () => (await c.count(queue)).completed === 100, { timeout: 45_000, message: "100 completed" });
    await stop(w);
    assert.equal(done.size, 100);
  } finally {
    await c.close();
    await own.stop();
  }
});

test("metrics in Prometheus' text format", () => {
  const queue = uniqueQueue("metrics");
  const w = new Worker(server.addr, queue, () => undefined, { concurrency: 3 });
  const text = w.prometheusText();
  assert.ok(text.includes(`sundial_worker_completed_total{queue="${queue}"} 0`));
  assert.ok(text.includes("# TYPE sundial_worker_completed_total counter"));
  assert.ok(text.includes(`sundial_worker_concurrency{queue="${queue}"} 3`));
});
