// enqueueFlow against a real sundiald: a tree across queues answered in pre-order, each parent
// waiting until its children complete; a refused flow leaves nothing; a resend with ids is a
// duplicate; bad trees refused before sending.
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

test("a tree across queues: pre-order answer, the parent released by its last child", async () => {
  const reports = uniqueQueue("flow-reports");
  const images = uniqueQueue("flow-images");
  const tree = {
    queue: reports, id: "r-7", payload: "weekly",
    children: [
      { queue: images, id: "i-1", children: [{ queue: images, id: "t-1" }] },
      { queue: images, id: "i-2" },
    ],
  };
  const nodes = await client.enqueueFlow(tree);
  assert.deepEqual(nodes.map((n) => `${n.queue === reports ? "R" : "I"}:${n.id}`), ["R:r-7", "I:i-1", "I:t-1", "I:i-2"]);
  assert.ok(nodes.every((n) => n.version === 1 && !n.duplicate));
  assert.equal((await client.get(reports, "r-7")).state, "waiting");
  assert.equal((await client.get(images, "i-1")).state, "waiting");
  // The leaves first: t-1 and i-2; then i-1; then r-7.
  for (let round = 0; round < 2; round++) {
    const leased = await client.dequeue(images, { max: 10 });
    for (const m of leased) await client.complete(images, m.id, m.lease_token);
  }
  const [report] = await client.dequeue(reports);
  assert.equal(report.id, "r-7");
  assert.equal(report.payload.toString(), "weekly");

  const again = await client.enqueueFlow(tree);
  assert.ok(again.every((n) => n.duplicate), "a resend of a tree whose root exists");
});

test("a refused flow enqueues nothing, and bad trees are refused before sending", async () => {
  const q = uniqueQueue("flow-bad");
  await rejectsWith(client.enqueueFlow([{ queue: q, id: "a" }, { queue: q, id: "b", depends_on: ["nope"] }]), { code: "NOT_FOUND" });
  await rejectsWith(client.get(q, "a"), { code: "NOT_FOUND" });
  for (const [tree, what] of [
    [[], /1-1000 nodes/],
    [{ id: "x" }, /queue: must be a string/],
    [{ queue: q, child: [] }, /unknown option "child"/],
    [{ queue: q, children: "no" }, /must be a node or an array/],
  ]) {
    await assert.rejects(client.enqueueFlow(tree), (e) => {
      assert.ok(e instanceof SundialError);
      assert.equal(e.code, "INVALID_ARGUMENT");
      assert.match(e.message, what);
      return true;
    });
  }
  let deep = { queue: q };
  for (let i = 0; i < 32; i++) deep = { queue: q, children: [deep] };
  await assert.rejects(client.enqueueFlow(deep), /at most 32 levels/);
});
