// TLS with a CA file and the auth token, on both ports: the binary protocol, watch() over wss,
// and the Worker.
"use strict";

const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { after, before, test } = require("node:test");

const { Client, Worker } = require("sundial-client");
const { Server, TestPki, rejectsWith, tempDir, uniqueQueue, waitFor } = require("./helpers");

let pki;
let tlsServer;
let tokenServer;

before(async () => {
  pki = new TestPki().makeCa("ca").makeCa("other-ca").makeServer("server", "ca").makeServer("elsewhere", "ca", "DNS:elsewhere.example");
  const tokenFile = path.join(tempDir(), "token");
  fs.writeFileSync(tokenFile, "s3cret\n");
  tlsServer = await new Server({ flags: ["--tls-cert", pki.cert("server"), "--tls-key", pki.key("server"), "--auth-token-file", tokenFile] }).start();
  tokenServer = await new Server({ flags: ["--auth-token-file", tokenFile] }).start();
});

after(async () => {
  await tlsServer.stop();
  await tokenServer.stop();
});

test("a token is required and checked; the right one works", async () => {
  await rejectsWith(new Client(tokenServer.addr).stats(), { code: "UNAUTHENTICATED" });
  await rejectsWith(new Client(tokenServer.addr, { token: "wrong" }).stats(), { code: "UNAUTHENTICATED", origin: "server", message: /token/ });
  const c = new Client(tokenServer.addr, { token: "s3cret" });
  assert.equal((await c.health()).ready, true);
  await c.close();
});

test("TLS with the CA file: every call works, by IP address and by name", async () => {
  const queue = uniqueQueue("tls");
  for (const addr of [tlsServer.addr, `localhost:${tlsServer.port}`]) {
    const c = new Client(addr, { tls: true, ca_file: pki.cert("ca"), token: "s3cret" });
    const r = await c.enqueue(queue, "over tls");
    assert.equal((await c.get(queue, r.id)).payload.toString(), "over tls");
    await c.close();
  }
});

test("a certificate from another CA, or for another name, is refused at once", async () => {
  const wrongCa = new Client(tlsServer.addr, { tls: true, ca_file: pki.cert("other-ca"), token: "s3cret", timeout_ms: 30_000 });
  const started = Date.now();
  await rejectsWith(wrongCa.stats(), { code: "UNAVAILABLE", origin: "connection", message: /certificate/ });
  assert.ok(Date.now() - started < 10_000, "not retried until the deadline");
  const wrongName = new Client(tlsServer.addr, { tls: true, ca_file: pki.cert("ca"), token: "s3cret", server_name: "elsewhere.example" });
  await rejectsWith(wrongName.stats(), { code: "UNAVAILABLE", message: /certificate/ });
  const plain = new Client(tlsServer.addr, { token: "s3cret", timeout_ms: 2000 });
  const e = await rejectsWith(plain.stats(), {});
  assert.ok(["UNAVAILABLE", "INTERNAL"].includes(e.code), String(e));
});

test("watch over wss with the token; a wrong token is UNAUTHENTICATED", async () => {
  const queue = uniqueQueue("wss");
  const options = { tls: true, ca_file: pki.cert("ca"), http_addr: tlsServer.httpAddr };
  const c = new Client(tlsServer.addr, { ...options, token: "s3cret" });
  const watch = c.watch(queue);
  await watch.subscribed;
  await c.enqueue(queue, "", { id: "seen" });
  for await (const event of watch) {
    if (event.type !== "message") continue;
    assert.deepEqual([event.id, event.cause], ["seen", "enqueued"]);
    break;
  }
  await c.close();
  const wrong = new Client(tlsServer.addr, { ...options, token: "wrong" });
  await rejectsWith(wrong.watch(queue).subscribed, { code: "UNAUTHENTICATED", origin: "server", message: /401/ });
});

test("a Worker over TLS with a token", async () => {
  const queue = uniqueQueue("tls-worker");
  const options = { tls: true, ca_file: pki.cert("ca"), token: "s3cret" };
  const c = new Client(tlsServer.addr, options);
  await c.enqueueBatch(queue, [{ id: "a" }, { id: "b" }]);
  const done = [];
  const w = new Worker(tlsServer.addr, queue, (m) => void done.push(m.id), { ...options, handle_signals: false, logger: null });
  const running = w.run();
  await waitFor(async () => (await c.count(queue)).completed === 2, { message: "2 completed" });
  w.stop();
  await running;
  assert.deepEqual(done.sort(), ["a", "b"]);
  await c.close();
});

test("a Worker with a wrong token stops at once with UNAUTHENTICATED", async () => {
  const w = new Worker(tokenServer.addr, uniqueQueue("wrong-token"), () => undefined, { token: "wrong", handle_signals: false, logger: null });
  await rejectsWith(w.run(), { code: "UNAUTHENTICATED", origin: "server" });
});
