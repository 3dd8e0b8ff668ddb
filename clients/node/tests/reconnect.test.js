// Reconnects: a server restarted or killed under the client, a list of addresses.
"use strict";

const assert = require("node:assert/strict");
const childProcess = require("node:child_process");
const net = require("node:net");
const { test } = require("node:test");

const { Client } = require("sundial-client");
const { Server, childEnv, rejectsWith, uniqueQueue, waitFor } = require("./helpers");

test("the client reconnects after a server restart; a read is sent again and the data survived", async () => {
  const server = await new Server({ fixedPort: true }).start();
  const queue = uniqueQueue("restart");
  const c = new Client(server.addr, { timeout_ms: 20_000 });
  try {
    await c.enqueue(queue, "before", { id: "a" });
    assert.equal(await server.terminate(), 0);
    await waitFor(() => !c.connected, { message: "the client seeing the close" });
    await server.restart();
    assert.equal((await c.get(queue, "a")).payload.toString(), "before");
    await c.enqueue(queue, "after", { id: "b" });
    assert.equal((await c.count(queue)).pending, 2);
  } finally {
    await c.close();
    await server.stop();
  }
});

test("a mutation in flight when the server dies is UNAVAILABLE (it may have been applied)", async () => {
  const server = await new Server({ fixedPort: true }).start();
  const queue = uniqueQueue("in-flight");
  const c = new Client(server.addr, { timeout_ms: 30_000 });
  try {
    await c.createQueue(queue);
    const poll = rejectsWith(c.dequeue(queue, { wait_ms: 30_000 }), { code: "UNAVAILABLE", origin: "connection" });
    await c.stats(); // answered after the poll on the same connection: the server has it
    await server.stop();
    await poll;
    await server.restart();
    assert.equal((await c.count(queue)).pending, 0); // and the client works again
  } finally {
    await c.close();
    await server.stop();
  }
});

test("a call made while the server is down waits for it within its deadline", async () => {
  const server = await new Server({ fixedPort: true }).start();
  const queue = uniqueQueue("down");
  const c = new Client(server.addr, { timeout_ms: 30_000 });
  try {
    await c.enqueue(queue, "", { id: "a" });
    await server.stop();
    await waitFor(() => !c.connected, { message: "the client seeing the close" });
    const pending = c.enqueue(queue, "", { id: "b" }); // never written: safe to send when back
    await server.restart();
    assert.equal((await pending).id, "b");
    assert.equal((await c.count(queue)).pending, 2);
  } finally {
    await c.close();
    await server.stop();
  }
});

test("with a list of addresses the client connects to one that answers", async () => {
  const server = await new Server().start();
  const refused = net.createServer();
  await new Promise((resolve) => refused.listen(0, "127.0.0.1", resolve));
  const deadPort = refused.address().port;
  await new Promise((resolve) => refused.close(resolve)); // nothing listens there now
  const c = new Client([`127.0.0.1:${deadPort}`, server.addr], { timeout_ms: 10_000 });
  try {
    assert.equal(c.address, `127.0.0.1:${deadPort}`);
    assert.equal((await c.health()).live, true);
    assert.equal(c.address, server.addr);
  } finally {
    await c.close();
    await server.stop();
  }
});

test("close() during a connect that is backing off ends the call at once", async () => {
  const refused = net.createServer();
  await new Promise((resolve) => refused.listen(0, "127.0.0.1", resolve));
  const port = refused.address().port;
  await new Promise((resolve) => refused.close(resolve));
  const c = new Client(`127.0.0.1:${port}`, { timeout_ms: 60_000 });
  const call = c.stats(); // retries with backoff for up to a minute
  await c.close();
  await rejectsWith(call, { code: "UNAVAILABLE", message: /closed/ });
});

test("an idle client does not keep the process alive: a script that forgets close() ends", async () => {
  const server = await new Server().start();
  try {
    const script = `
      const { Client } = require("sundial-client");
      const c = new Client(${JSON.stringify(server.addr)});
      c.enqueue("forgotten", "x").then((r) => console.log("enqueued", r.id));
    `;
    const child = childProcess.spawn(process.execPath, ["-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
      env: childEnv(),
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    // Bounded: a script kept alive by the client is killed, and the test fails.
    const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    const code = await new Promise((resolve) => child.on("exit", resolve));
    clearTimeout(killer);
    assert.equal(code, 0, "the script did not end by itself");
    assert.match(out, /^enqueued /);
  } finally {
    await server.stop();
  }
});
