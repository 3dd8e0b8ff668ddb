// Dependencies against a real sundiald (docs/semantics.md, "Dependencies"): enqueue with
// depends_on makes a waiting message (counted as waiting); once its dependency completes, a
// dequeue with include_dependency_results carries the dependency's outcome; bad input.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { STATES } = require("sundial-client");
const { rejectsWith, startWorker, stopWorker, uniqueQueue, useServer, waitFor } = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

test("the state list knows waiting (6)", () => {
  assert.equal(STATES[6], "waiting");
});

test("a dependent waits, then carries its dependency's outcome", async () => {
  const queue = uniqueQueue("deps");
  await client.enqueue(queue, "parent", { id: "parent" });
  await client.enqueue(queue, "child", { id: "child", depends_on: ["parent"], on_dependency_failure: "release" });
  assert.equal((await client.get(queue, "child")).state, "waiting");
  const counts = await client.count(queue);
  assert.deepEqual([counts.waiting, counts.pending], [1, 1]);
  const why = await client.explain(queue, "child");
  assert.equal(why.reason, "waiting_on_dependencies");
  assert.deepEqual([why.dependencies, why.unfinished, why.waiting_on], [1, 1, [`${queue}/parent`]]);

  const [parent] = await client.dequeue(queue);
  assert.equal(parent.id, "parent");
  assert.equal(parent.dependency_results, undefined);
  assert.deepEqual(await client.dequeue(queue), []);
  await client.complete(queue, "parent", parent.lease_token);

  const [child] = await client.dequeue(queue, { include_dependency_results: true });
  assert.equal(child.id, "child");
  assert.equal(child.dependency_results.length, 1);
  const [dep] = child.dependency_results;
  assert.deepEqual([dep.id, dep.state, dep.done, dep.error], [`${queue}/parent`, "completed", true, null]);
  assert.equal(dep.result.length, 0);
  const got = await client.get(queue, "child", { include_dependency_results: true });
  assert.equal(got.dependency_results[0].id, `${queue}/parent`);
  assert.equal((await client.get(queue, "child")).dependency_results, undefined);
});

test("complete-and-next leases the released dependent with its dependency's result", async () => {
  const queue = uniqueQueue("deps-next");
  await client.enqueue(queue, "parent", { id: "parent" });
  await client.enqueue(queue, "child", { id: "child", depends_on: [`${queue}/parent`] });
  const [parent] = await client.dequeue(queue);
  const r = await client.completeAndNext(queue, [{ id: "parent", lease_token: parent.lease_token, result: "42" }], {
    include_dependency_results: true,
  });
  assert.deepEqual(r.errors, [null]);
  assert.equal(r.next.length, 1);
  assert.equal(r.next[0].id, "child");
  assert.equal(r.next[0].dependency_results[0].result.toString(), "42");
});

test("bad dependencies are typed errors", async () => {
  const queue = uniqueQueue("deps-bad");
  await rejectsWith(client.enqueue(queue, "", { id: "c", depends_on: ["missing"] }), { code: "NOT_FOUND" });
  await rejectsWith(client.enqueue(queue, "", { id: "c", depends_on: [""] }), { code: "INVALID_ARGUMENT" });
  await rejectsWith(client.enqueue(queue, "", { id: "c", depends_on: ["x"], on_dependency_failure: "retry" }), {
    code: "INVALID_ARGUMENT",
    origin: "local",
  });
  await rejectsWith(client.enqueue(queue, "", { id: "c", depends_on: "x" }), { code: "INVALID_ARGUMENT", origin: "local" });
});

test("a Worker hands its handler the dependency results, also for a lease its complete brought", async () => {
  // p runs first; its complete carries the next dequeue, which leases c (released by that very
  // complete): c must still come with p's result.
  const queue = uniqueQueue("deps-worker");
  await client.enqueue(queue, "p", { id: "p" });
  await client.enqueue(queue, "c", { id: "c", depends_on: ["p"] });
  const seen = {};
  const w = startWorker(server.addr, queue, (m) => {
    seen[m.id] = (m.dependency_results ?? []).map((d) => [d.id, d.result.toString()]);
    return `from ${m.id}`;
  }, { concurrency: 1, include_dependency_results: true });
  await waitFor(async () => (await client.get(queue, "c")).state === "completed", { message: "c completed" });
  await stopWorker(w);
  assert.deepEqual(seen, { p: [], c: [[`${queue}/p`, "from p"]] });
});
