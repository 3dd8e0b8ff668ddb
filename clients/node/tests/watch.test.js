// watch(): subscriptions over WebSocket on the HTTP port (docs/protocol.md#subscriptions).
"use strict";

const assert = require("node:assert/strict");
const { after, before, test } = require("node:test");

const { Client } = require("sundial-client");
const { Server, rejectsWith, uniqueQueue } = require("./helpers");

let server;
let client;

before(async () => {
  server = await new Server().start();
  client = new Client(server.addr, { timeout_ms: 20_000, http_addr: server.httpAddr });
});

after(async () => {
  await client.close();
  await server.stop();
});

/** The next `n` message events of `watch` (stats ticks skipped). */
async function messageEvents(watch, n) {
  const events = [];
  for await (const event of watch) {
    if (event.type !== "message") continue;
    events.push(event);
    if (events.length === n) break; // ends the subscription
  }
  return events;
}

test("watch yields a message's transitions in order, then ends on break", async () => {
  const queue = uniqueQueue("watch");
  const watch = client.watch(queue);
  await watch.subscribed;
  await client.enqueue(queue, "x", { id: "m" });
  const [m] = await client.dequeue(queue);
  await client.complete(queue, m.id, m.lease_token);
  const events = await messageEvents(watch, 3);
  assert.deepEqual(
    events.map((e) => [e.queue, e.id, e.from, e.to, e.cause]),
    [
      [queue, "m", "pending", "pending", "enqueued"],
      [queue, "m", "pending", "running", "leased"],
      [queue, "m", "running", "completed", "completed"],
    ],
  );
  assert.deepEqual(events.map((e) => e.version), [1, 2, 3]);
  assert.ok(events.every((e) => e.time > 0));
  const after = await watch.next();
  assert.equal(after.done, true); // break closed it
});

test("a filter and ids narrow the events; '*' watches every queue", async () => {
  const queue = uniqueQueue("filtered");
  const other = uniqueQueue("other");
  const filtered = client.watch(queue, { filter: { tenant: "acme" } });
  const byId = client.watch(queue, { ids: ["wanted"] });
  const all = client.watch("*");
  await Promise.all([filtered.subscribed, byId.subscribed, all.subscribed]);
  await client.enqueue(queue, "", { id: "globex", metadata: { tenant: "globex" } });
  await client.enqueue(queue, "", { id: "wanted", metadata: { tenant: "acme" } });
  await client.enqueue(other, "", { id: "elsewhere" });
  assert.deepEqual((await messageEvents(filtered, 1)).map((e) => e.id), ["wanted"]);
  assert.deepEqual((await messageEvents(byId, 1)).map((e) => e.id), ["wanted"]);
  const seen = new Set();
  for await (const event of all) {
    if (event.type === "message" && [queue, other].includes(event.queue)) seen.add(event.id);
    if (seen.size === 3) break;
  }
  assert.deepEqual([...seen].sort(), ["elsewhere", "globex", "wanted"]);
});

test("stats ticks arrive every second, with every queue's figures on request", async () => {
  const queue = uniqueQueue("ticks");
  await client.createQueue(queue, { flow_key: "tenant", key_concurrency: 3 });
  await client.enqueue(queue, "", { metadata: { tenant: "a" } });
  const watch = client.watch(queue, { queue_stats: true, max_events_per_sec: 0 });
  for await (const event of watch) {
    assert.equal(event.type, "stats"); // max_events_per_sec 0: ticks only
    assert.ok(event.stats.uptime_ms > 0 && event.time > 0);
    const mine = event.queues.find((q) => q.queue.name === queue);
    assert.ok(mine, "this queue in the tick");
    assert.equal(mine.queue.counts.pending, 1);
    assert.equal(mine.enqueued, 1);
    assert.equal(mine.queue.flow_key, "tenant"); // the tick carries every setting
    assert.equal(mine.queue.key_concurrency, 3);
    break;
  }
});

test("close() ends the iteration; a refused subscribe rejects", async () => {
  const watch = client.watch(uniqueQueue("close"));
  await watch.subscribed;
  const next = watch.next();
  await watch.close();
  assert.deepEqual(await next, { value: undefined, done: true });
  const refused = client.watch("*", { filter: Object.fromEntries([0, 1, 2, 3, 4].map((i) => [`k${i}`, "v"])) });
  await rejectsWith(refused.subscribed, { code: "INVALID_ARGUMENT", origin: "server", message: /filter/ });
  await rejectsWith(refused.next(), { code: "INVALID_ARGUMENT" });
  assert.throws(() => client.watch("*", { queueStats: true }), (e) => e.code === "INVALID_ARGUMENT");
});

test("a server that goes away ends the iteration with UNAVAILABLE", async () => {
  const own = await new Server().start();
  const c = new Client(own.addr, { http_addr: own.httpAddr });
  const watch = c.watch("*");
  await watch.subscribed;
  await own.stop();
  await rejectsWith((async () => {
    for await (const event of watch) void event;
  })(), { code: "UNAVAILABLE", origin: "connection" });
  await rejectsWith(c.watch("*", { timeout_ms: 2000 }).subscribed, { code: "UNAVAILABLE", origin: "connection" });
});
