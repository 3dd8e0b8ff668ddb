// SIGTERM and SIGINT: a worker in its own process (worker_process.js) lets its running handler
// finish and completes it, gives prefetched messages back at once, leaves a handler that never
// returns to its lease, and exits 0.
"use strict";

const assert = require("node:assert/strict");
const childProcess = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { test } = require("node:test");

const { childEnv, tempDir, uniqueQueue, useServer, waitFor } = require("./helpers");

let server;
let client;

useServer((s, c) => {
  server = s;
  client = c;
});

class WorkerProcess {
  constructor(queue, mode, shutdownTimeoutMs, prefetch = 0) {
    const dir = tempDir("sundial-node-worker-");
    this.release = path.join(dir, "release");
    this.lines = [];
    this.log = "";
    this.proc = childProcess.spawn(
      process.execPath,
      [path.join(__dirname, "worker_process.js"), server.addr, queue, mode, String(shutdownTimeoutMs), String(prefetch), this.release],
      { env: childEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    let partial = "";
    this.proc.stdout.on("data", (d) => {
      partial += d;
      const lines = partial.split("\n");
      partial = lines.pop();
      this.lines.push(...lines);
    });
    this.proc.stderr.on("data", (d) => (this.log += d));
    this.exit = new Promise((resolve) => this.proc.on("exit", (code, signal) => resolve(code ?? signal)));
    // Bounded: a worker that does not exit is killed, and the test fails on its status.
    this.killer = setTimeout(() => this.proc.kill("SIGKILL"), 60_000);
    this.exit.then(() => clearTimeout(this.killer));
  }

  signal(name = "SIGTERM") {
    this.proc.kill(name);
  }
}

test("SIGTERM lets the running handler finish, completes it, gives prefetched messages back at once, exits 0", async () => {
  const queue = uniqueQueue("sigterm");
  await client.createQueue(queue, { lease_ms: 30_000 });
  await client.enqueueBatch(queue, [{ id: "first", priority: 1 }, { id: "second", priority: 2 }, { id: "third", priority: 3 }]);
  const p = new WorkerProcess(queue, "finish", 30_000, 2);
  await waitFor(() => p.lines.includes("started first"), { timeout: 30_000, message: "handler started" });
  await waitFor(async () => (await client.count(queue)).running === 3, { message: "two more prefetched" });
  p.signal("SIGTERM");
  // Given back long before their 30 s lease would end, while the handler still runs.
  await waitFor(async () => (await client.count(queue)).pending === 2, { message: "prefetched given back" });
  assert.match(p.log, /worker stopping/);
  assert.equal(p.proc.exitCode, null); // still waiting for its handler
  fs.writeFileSync(p.release, "");
  assert.equal(await p.exit, 0, p.log);
  assert.ok(p.lines.includes("run returned"));
  assert.equal((await client.get(queue, "first")).state, "completed");
  for (const id of ["second", "third"]) {
    const m = await client.get(queue, id);
    assert.deepEqual([m.state, m.attempts], ["pending", 1], id); // the dequeue's attempt stays spent
  }
  assert.ok(!p.lines.includes("started second"));
});

test("SIGINT works like SIGTERM", async () => {
  const queue = uniqueQueue("sigint");
  await client.createQueue(queue, { lease_ms: 5000 });
  await client.enqueueBatch(queue, [{ id: "first", priority: 1 }, { id: "second", priority: 2 }]);
  const p = new WorkerProcess(queue, "finish", 30_000);
  await waitFor(() => p.lines.includes("started first"), { timeout: 30_000, message: "handler started" });
  p.signal("SIGINT");
  await waitFor(() => p.log.includes("worker stopping"), { message: "the worker seeing SIGINT" });
  fs.writeFileSync(p.release, "");
  assert.equal(await p.exit, 0, p.log);
  assert.equal((await client.get(queue, "first")).state, "completed");
  const second = await client.get(queue, "second");
  assert.deepEqual([second.state, second.attempts], ["pending", 0]); // never fetched
});

test("SIGTERM with a handler that never returns exits 0 after the timeout, leaving it to its lease", async () => {
  const queue = uniqueQueue("stuck");
  await client.createQueue(queue, { lease_ms: 1000 });
  await client.enqueue(queue, "", { id: "stuck" });
  const p = new WorkerProcess(queue, "hang", 500);
  await waitFor(() => p.lines.includes("started stuck"), { timeout: 30_000, message: "handler started" });
  p.signal("SIGTERM");
  assert.equal(await p.exit, 0, p.log);
  assert.match(p.log, /left to its lease/);
  await waitFor(async () => (await client.get(queue, "stuck")).state === "pending", { message: "lease expiry" });
  assert.equal((await client.get(queue, "stuck")).attempts, 1);
});

test("a second SIGTERM skips the wait and leaves the handler to its lease", async () => {
  const queue = uniqueQueue("twice");
  await client.createQueue(queue, { lease_ms: 1000 });
  await client.enqueue(queue, "", { id: "slow" });
  const p = new WorkerProcess(queue, "finish", 60_000); // would wait 60 s for the handler
  await waitFor(() => p.lines.includes("started slow"), { timeout: 30_000, message: "handler started" });
  p.signal("SIGTERM");
  await waitFor(() => p.log.includes("worker stopping"), { message: "the worker seeing SIGTERM" });
  p.signal("SIGTERM");
  assert.equal(await p.exit, 0, p.log);
  assert.match(p.log, /left to its lease/);
  await waitFor(async () => (await client.get(queue, "slow")).state === "pending", { message: "lease expiry" });
});
