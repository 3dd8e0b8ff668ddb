// The Client and the Worker following a cluster's primary (docs/clients/typescript.md#clusters),
// against a real cluster: Debian's etcd ($SUNDIAL_ETCD_BIN, default /usr/bin/etcd) and three
// sundiald nodes on loopback, started per test. Registered in ctest as node_client_cluster
// (label "cluster"), apart from the single-server suite, and one at a time with the other
// cluster suites (RESOURCE_LOCK). Failovers use --leader-ttl-s 2; every wait is a bounded poll of
// a condition (waitFor).
"use strict";

const assert = require("node:assert/strict");
const childProcess = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { test } = require("node:test");

const { Client, SundialError, Worker } = require("sundial-client");
const { FIXED_PORTS, START_TIMEOUT_MS, SUNDIALD, portIsFree, rejectsWith, tempDir, waitFor } = require("./helpers");

const ETCD = process.env.SUNDIAL_ETCD_BIN || "/usr/bin/etcd";
const skip = fs.existsSync(ETCD) ? false : `no etcd at ${ETCD}`;

/** `n` distinct free loopback ports below the ephemeral range. */
async function freePorts(n) {
  const ports = [];
  while (ports.length < n) {
    const port = FIXED_PORTS[0] + Math.floor(Math.random() * (FIXED_PORTS[1] - FIXED_PORTS[0]));
    if (!ports.includes(port) && (await portIsFree(port))) ports.push(port);
  }
  return ports;
}

/** etcd and three sundiald nodes (n1..n3) in one temporary directory. */
class Cluster {
  constructor() {
    this.root = tempDir("sundial-node-cluster-");
    this.procs = {};
    this.nodes = {}; // name -> {port, httpPort, replicationPort}
    this.etcd = null;
  }

  async start() {
    const [clientPort, peerPort] = await freePorts(2);
    this.etcdUrl = `http://127.0.0.1:${clientPort}`;
    const peer = `http://127.0.0.1:${peerPort}`;
    const name = `sundial-node-${path.basename(this.root)}`;
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ETCD_")));
    const log = fs.openSync(path.join(this.root, "etcd.log"), "a");
    this.etcd = childProcess.spawn(
      ETCD,
      [
        `--name=${name}`,
        `--data-dir=${this.root}/etcd`,
        `--listen-client-urls=${this.etcdUrl}`,
        `--advertise-client-urls=${this.etcdUrl}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=${name}=${peer}`,
        `--initial-cluster-token=${name}`,
        "--heartbeat-interval=50",
        "--election-timeout=500",
      ],
      { env, stdio: ["ignore", log, log] },
    );
    fs.closeSync(log);
    await waitFor(
      async () => {
        try {
          return (await (await fetch(`${this.etcdUrl}/health`)).text()).includes('"true"');
        } catch {
          return false;
        }
      },
      { timeout: START_TIMEOUT_MS, interval: 50, message: "etcd healthy" },
    );
    for (const node of ["n1", "n2", "n3"]) await this.startNode(node);
    return this;
  }

  async startNode(name) {
    if (this.nodes[name] === undefined) {
      const [port, httpPort, replicationPort] = await freePorts(3);
      this.nodes[name] = { port, httpPort, replicationPort };
    }
    const n = this.nodes[name];
    const data = path.join(this.root, name);
    const ready = `${data}.ready`;
    fs.rmSync(ready, { force: true });
    const log = fs.openSync(`${data}.log`, "a");
    const proc = childProcess.spawn(
      SUNDIALD,
      [
        "--data-dir", data,
        "--port", String(n.port),
        "--http-port", String(n.httpPort),
        "--replication-port", String(n.replicationPort),
        "--cluster", "node",
        "--node-name", name,
        "--etcd", this.etcdUrl,
        "--leader-ttl-s", "2",
        "--ready-file", ready,
        "--io-threads", "2",
      ],
      { stdio: ["ignore", log, log] },
    );
    fs.closeSync(log);
    this.procs[name] = proc;
    proc.exited = new Promise((resolve) => proc.once("exit", resolve));
    await waitFor(() => fs.existsSync(ready) || proc.exitCode !== null, { timeout: START_TIMEOUT_MS, message: `${name} ready` });
    assert.equal(proc.exitCode, null, `${name} exited: ${this.log(name)}`);
  }

  addr(name) {
    return `127.0.0.1:${this.nodes[name].port}`;
  }

  httpAddr(name) {
    return `127.0.0.1:${this.nodes[name].httpPort}`;
  }

  get addrs() {
    return Object.keys(this.nodes).sort().map((name) => this.addr(name));
  }

  log(name) {
    try {
      return fs.readFileSync(path.join(this.root, `${name}.log`), "utf8").slice(-6000);
    } catch {
      return "";
    }
  }

  alive(name) {
    const proc = this.procs[name];
    return proc.exitCode === null && proc.signalCode === null;
  }

  /** The node that answers as primary (with a published synchronous standby), or null. */
  async primary(withSyncStandby = true) {
    for (const name of Object.keys(this.nodes).sort()) {
      if (!this.alive(name)) continue;
      const c = new Client(this.addr(name), { timeout_ms: 1000 });
      try {
        const view = await c.cluster();
        if (view.primary === name && (view.sync_standby || !withSyncStandby)) return name;
      } catch (e) {
        if (!(e instanceof SundialError)) throw e;
      } finally {
        await c.close();
      }
    }
    return null;
  }

  waitForPrimary(withSyncStandby = true) {
    return waitFor(() => this.primary(withSyncStandby), { timeout: 30_000, interval: 50, message: "a primary" });
  }

  async kill(name) {
    const proc = this.procs[name];
    if (this.alive(name)) proc.kill("SIGKILL");
    await proc.exited;
  }

  async stop() {
    for (const name of Object.keys(this.procs)) await this.kill(name);
    if (this.etcd !== null && this.etcd.exitCode === null && this.etcd.signalCode === null) {
      const exited = new Promise((resolve) => this.etcd.once("exit", resolve));
      this.etcd.kill("SIGKILL");
      await exited;
    }
  }
}

/** A test with a cluster of its own whose primary has a synchronous standby; logs on failure. */
function clusterTest(name, body) {
  test(name, { skip, timeout: 180_000 }, async () => {
    const cluster = new Cluster();
    try {
      await cluster.start();
      await cluster.waitForPrimary();
      await body(cluster);
    } catch (e) {
      for (const node of Object.keys(cluster.nodes).sort()) process.stderr.write(`---- ${node} ----\n${cluster.log(node)}\n`);
      throw e;
    } finally {
      await cluster.stop();
    }
  });
}

clusterTest("a client given every address finds the primary and is redirected from a standby", async (cluster) => {
  const primary = await cluster.primary();
  const standbys = Object.keys(cluster.nodes).sort().filter((n) => n !== primary);
  // One standby's address alone: the single-server client, refused with NOT_PRIMARY naming the primary.
  const single = new Client(cluster.addr(standbys[0]));
  assert.equal(single.followsPrimary, false);
  const refused = await rejectsWith(single.enqueue("jobs", "x", { id: "a" }), { code: "NOT_PRIMARY", origin: "server" });
  assert.equal(refused.primary, cluster.addr(primary));
  await single.close();
  // The standbys first: the client goes where they say.
  const c = new Client([...standbys.map((n) => cluster.addr(n)), cluster.addr(primary)]);
  assert.equal(c.followsPrimary, true);
  assert.equal((await c.enqueue("jobs", "x", { id: "a" })).id, "a");
  assert.equal(c.address, cluster.addr(primary));
  assert.equal(c.connected, true);
  const view = await c.cluster();
  assert.equal(view.primary, primary);
  assert.equal(view.node, primary);
  assert.deepEqual(view.members.map((m) => m.role).sort(), ["primary", "standby", "standby"]);
  assert.ok(view.members.find((m) => m.node === primary).http_addr.endsWith(`:${cluster.nodes[primary].httpPort}`));
  await c.close();
  // A list of standbys only (no primary named in it): found through them.
  const viaStandbys = new Client(standbys.map((n) => cluster.addr(n)).join(","));
  assert.equal((await viaStandbys.get("jobs", "a")).id, "a");
  assert.equal(viaStandbys.address, cluster.addr(primary));
  await viaStandbys.close();
});

clusterTest("enqueues survive a kill of the primary without loss or duplicates", async (cluster) => {
  const old = await cluster.primary();
  const ackedIds = new Set();
  const ackedNoId = [];
  const errors = [];
  let stopping = false;
  const c = new Client(cluster.addrs, { timeout_ms: 5000 });
  const produce = (async () => {
    for (let i = 0; !stopping; i++) {
      try {
        if (i % 2 === 0) ackedIds.add((await c.enqueue("with-ids", `p${i}`, { id: `m-${i}` })).id);
        else ackedNoId.push((await c.enqueue("no-ids", `p${i}`)).id);
      } catch (e) {
        errors.push(e);
      }
    }
  })();
  try {
    await waitFor(() => ackedIds.size + ackedNoId.length >= 100, { timeout: 15_000, message: "100 enqueues before the kill" });
    await cluster.kill(old);
    const atKill = ackedIds.size + ackedNoId.length;
    await waitFor(() => ackedIds.size + ackedNoId.length >= atKill + 100, { timeout: 30_000, message: "100 enqueues after the kill" });
  } finally {
    stopping = true;
    await produce;
  }
  assert.deepEqual(errors.map(String).slice(0, 3), []);
  const now = await cluster.waitForPrimary(false);
  assert.notEqual(now, old);
  for (const id of ackedIds) assert.equal((await c.get("with-ids", id)).id, id);
  assert.equal((await c.count("with-ids")).pending, ackedIds.size);
  assert.equal((await c.count("no-ids")).pending, ackedNoId.length, "an enqueue was applied twice");
  assert.equal(new Set(ackedNoId).size, ackedNoId.length);
  await c.close();
});

clusterTest("the worker keeps working across a failover, and its results survive it", async (cluster) => {
  const n = 150;
  const c = new Client(cluster.addrs);
  await c.createQueue("work", { lease_ms: 10_000 });
  await c.enqueueBatch("work", Array.from({ length: n }, (_, i) => ({ id: `job-${i}`, payload: String(i) })));
  const handled = new Set();
  const w = new Worker(cluster.addrs, "work", async (message) => {
    handled.add(message.id);
    await new Promise((resolve) => setTimeout(resolve, 5)); // a little work, so the kill lands while jobs run
    return `done ${message.payload.toString()}`;
  }, { concurrency: 4, poll_ms: 2000, handle_signals: false, logger: null });
  const running = w.run();
  try {
    await waitFor(() => handled.size >= 30, { timeout: 15_000, message: "30 jobs handled" });
    await cluster.kill(await cluster.primary());
    await waitFor(
      async () => {
        const probe = new Client(cluster.addrs, { retry_budget_ms: 2000 });
        try {
          return (await probe.count("work")).completed === n;
        } catch (e) {
          if (!(e instanceof SundialError)) throw e;
          return false;
        } finally {
          await probe.close();
        }
      },
      { timeout: 45_000, interval: 200, message: "every job completed" },
    );
  } finally {
    w.stop();
    await running;
  }
  assert.equal(handled.size, n, "a job was never run");
  // At least once: a job whose complete was lost with the primary may run again; every job ends
  // completed exactly once, with its result.
  const counts = await c.count("work");
  assert.equal(counts.completed, n);
  assert.equal(counts.pending + counts.running + counts.errored, 0);
  const outcomes = await c.wait("work", Array.from({ length: n }, (_, i) => `job-${i}`));
  assert.deepEqual(outcomes.map((o) => o.result.toString()), Array.from({ length: n }, (_, i) => `done ${i}`));
  assert.ok(w.metrics().sundial_worker_completed_total >= n);
  await c.close();
});

clusterTest("switchover moves the primary; writes go on without loss, and a watch subscribes on the new one", async (cluster) => {
  const old = await cluster.primary();
  const acked = [];
  const errors = [];
  let stopping = false;
  const c = new Client(cluster.addrs);
  const produce = (async () => {
    for (let i = 0; !stopping; i++) {
      try {
        acked.push((await c.enqueue("q", "x", { id: `s-${i}` })).id);
      } catch (e) {
        errors.push(e);
      }
    }
  })();
  try {
    await waitFor(() => acked.length >= 50, { timeout: 15_000, message: "50 enqueues" });
    const admin = new Client(cluster.addrs);
    await admin.switchover();
    await admin.close();
    // The old primary's view can name itself for one more coordinator round.
    const now = await waitFor(
      async () => {
        const p = await cluster.primary(false);
        return p !== null && p !== old ? p : null;
      },
      { timeout: 30_000, interval: 50, message: "a new primary" },
    );
    const at = acked.length;
    await waitFor(() => acked.length >= at + 50, { timeout: 30_000, message: "50 enqueues on the new primary" });
    assert.equal(c.address, cluster.addr(now));
  } finally {
    stopping = true;
    await produce;
  }
  assert.deepEqual(errors.map(String).slice(0, 3), []);
  assert.equal((await c.count("q")).pending, acked.length);
  // A watch of a following client subscribes on the primary's HTTP port.
  const watch = c.watch("q");
  await watch.subscribed;
  await c.enqueue("q", "seen", { id: "watched" });
  for await (const event of watch) {
    if (event.type === "message" && event.id === "watched") break;
  }
  await c.close();
});

/** The first event of `watch` that `matches`, within `timeoutMs`. */
async function nextEvent(watch, matches, timeoutMs, message) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) assert.fail(`timed out after ${timeoutMs} ms waiting for ${message}`);
    let timer;
    const result = await Promise.race([
      watch.next(),
      new Promise((resolve) => (timer = setTimeout(() => resolve(null), remaining))),
    ]);
    clearTimeout(timer);
    if (result === null) assert.fail(`timed out after ${timeoutMs} ms waiting for ${message}`);
    if (!result.done && matches(result.value)) return result.value;
  }
}

clusterTest("a watch keeps delivering events after a failover, marking the gap", async (cluster) => {
  const old = await cluster.primary();
  const c = new Client(cluster.addrs, { timeout_ms: 5000 });
  const w = c.watch("wq");
  await w.subscribed;
  assert.equal(w.address, cluster.httpAddr(old));
  await c.enqueue("wq", "", { id: "before" });
  await nextEvent(w, (e) => e.type === "message" && e.id === "before", 15_000, "the event of an enqueue before the kill");
  await cluster.kill(old);
  await c.enqueue("wq", "", { id: "during" }); // waits for the new primary; its event may be missed
  const marker = await nextEvent(w, (e) => e.type === "resubscribed", 30_000, "the marker");
  assert.notEqual(marker.node, old);
  assert.equal(marker.node, (await c.cluster()).primary);
  assert.equal(w.address, marker.address);
  assert.equal(marker.address, cluster.httpAddr(marker.node));
  assert.equal(w.resubscriptions, 1);
  assert.equal(marker.error.code, "UNAVAILABLE");
  assert.ok(marker.time > 0);
  await c.enqueue("wq", "", { id: "after" });
  const e = await nextEvent(w, (e) => e.type === "message" && e.id === "after", 15_000, "the event after the resubscription");
  assert.deepEqual([e.cause, e.to], ["enqueued", "pending"]);
  await w.close();
  await c.close();
});

clusterTest("a watch on a paused primary moves to the new one", async (cluster) => {
  // A paused primary closes nothing: the watch hears nothing for timeout_ms, asks who leads, and
  // subscribes on the new primary.
  const old = await cluster.primary();
  const c = new Client(cluster.addrs, { timeout_ms: 2000 });
  const w = c.watch("pq");
  await w.subscribed;
  await c.enqueue("pq", "", { id: "before" });
  await nextEvent(w, (e) => e.type === "message" && e.id === "before", 15_000, "the event of an enqueue before the pause");
  cluster.procs[old].kill("SIGSTOP");
  try {
    await c.enqueue("pq", "", { id: "during" }); // on the new primary, once elected
    const marker = await nextEvent(w, (e) => e.type === "resubscribed", 30_000, "the marker");
    assert.notEqual(marker.node, old);
    assert.equal(marker.error.code, "NOT_PRIMARY");
    await c.enqueue("pq", "", { id: "after" });
    await nextEvent(w, (e) => e.type === "message" && e.id === "after", 15_000, "the event after the resubscription");
  } finally {
    cluster.procs[old].kill("SIGCONT");
  }
  await w.close();
  await c.close();
});
