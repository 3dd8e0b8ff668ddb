// Test fixtures: a real sundiald in a temporary data directory on a loopback port, as
// tests/e2e and clients/python/tests do.
//
// The binary is $SUNDIALD (ctest sets it) or build/release/server/sundiald of this checkout. A
// server is ready when its --ready-file exists (it writes the file once both ports listen), so
// no test guesses how long a start takes. Waits are bounded polls of a condition (waitFor),
// never a sleep that hopes.
//
// Tests that restart a server get it on a fixed port below the kernel's ephemeral range, so
// that the restart can listen on it again and clients reconnect to the same address.
"use strict";

const assert = require("node:assert/strict");
const childProcess = require("node:child_process");
const crypto = require("node:crypto");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..", "..", "..");
const SUNDIALD = process.env.SUNDIALD || path.join(ROOT, "build", "release", "server", "sundiald");
const START_TIMEOUT_MS = 30_000;
// Below 32768, the usual start of net.ipv4.ip_local_port_range: no outgoing connection takes one
// of these as its source port while a test restarts its server.
const FIXED_PORTS = [20000, 32000];

const roots = [];

/** A temporary directory, removed when the test process exits. */
function tempDir(prefix = "sundial-node-test-") {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  roots.push(dir);
  return dir;
}

process.on("exit", () => {
  for (const s of Server.all) s.kill();
  for (const dir of roots) fs.rmSync(dir, { recursive: true, force: true });
});

function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Polls `condition()` (sync or async) until it returns a truthy value, which is returned; fails
 * the test after `timeout` ms.
 */
async function waitFor(condition, { timeout = 15_000, interval = 10, message = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeout} ms waiting for ${message}`);
    await delay(interval);
  }
}

/** A queue name no other test uses. */
function uniqueQueue(name = "q") {
  return `t-${name.replace(/[^A-Za-z0-9.:-]/g, "-").slice(0, 60)}-${crypto.randomBytes(4).toString("hex")}`;
}

function portIsFree(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** One sundiald process over a data directory that outlives restarts. */
class Server {
  static all = new Set();

  constructor({ flags = [], fixedPort = false, dataDir = null } = {}) {
    this.dataDir = dataDir || path.join(tempDir(), "data");
    this.flags = flags;
    this.fixedPort = fixedPort;
    this.port = null;
    this.httpPort = null;
    this.proc = null;
    this.logPath = `${this.dataDir}.log`;
    Server.all.add(this);
  }

  get addr() {
    return `127.0.0.1:${this.port}`;
  }

  get httpAddr() {
    return `127.0.0.1:${this.httpPort}`;
  }

  async start() {
    if (this.port === null && this.fixedPort) {
      for (let i = 0; i < 50; i++) {
        const port = FIXED_PORTS[0] + Math.floor(Math.random() * (FIXED_PORTS[1] - FIXED_PORTS[0]));
        if ((await portIsFree(port)) && (await this.launch(port, false))) return this;
      }
      assert.fail("no free port below the ephemeral range for a restartable server");
    }
    await this.launch(this.fixedPort ? this.port : 0, true);
    return this;
  }

  /** Starts it again on the same data directory (and port, if fixed). */
  async restart() {
    assert.ok(this.proc === null || this.proc.exitCode !== null || this.proc.signalCode !== null, "stop or kill it first");
    if (!this.fixedPort) return this.launch(0, true);
    const deadline = Date.now() + START_TIMEOUT_MS;
    // The port is ours; a listener of the old process may linger for a moment.
    while (!(await this.launch(this.port, false))) {
      if (Date.now() > deadline) assert.fail(`sundiald cannot listen on ${this.port} again: ${this.log()}`);
      await delay(50);
    }
    return this;
  }

  async launch(port, required) {
    const ready = `${this.dataDir}.ready`;
    fs.rmSync(ready, { force: true });
    if (!fs.existsSync(SUNDIALD)) assert.fail(`no sundiald at ${SUNDIALD}: build it (make build) or set SUNDIALD`);
    const args = ["--data-dir", this.dataDir, "--port", String(port), "--http-port", "0", "--ready-file", ready, "--io-threads", "2", ...this.flags];
    const log = fs.openSync(this.logPath, "a");
    const proc = childProcess.spawn(SUNDIALD, args, { stdio: ["ignore", log, log] });
    fs.closeSync(log);
    this.proc = proc;
    const exited = new Promise((resolve) => proc.once("exit", resolve));
    this.exited = exited;
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (fs.existsSync(ready)) {
        let info = {};
        try {
          info = JSON.parse(fs.readFileSync(ready, "utf8"));
        } catch {
          // written atomically, but be safe
        }
        if (info.port) {
          this.port = info.port;
          this.httpPort = info.http_port;
          return true;
        }
      }
      if (proc.exitCode !== null || proc.signalCode !== null) {
        if (!required) return false;
        assert.fail(`sundiald exited with ${proc.exitCode ?? proc.signalCode}: ${this.log()}`);
      }
      await delay(5);
    }
    this.kill();
    assert.fail(`sundiald not ready after ${START_TIMEOUT_MS} ms: ${this.log()}`);
  }

  /** SIGTERM; resolves with its exit code. */
  async terminate() {
    this.proc.kill("SIGTERM");
    await this.exited;
    return this.proc.exitCode;
  }

  /** SIGKILL, and waits for the exit. */
  async stop() {
    this.kill();
    if (this.proc !== null) await this.exited;
  }

  kill() {
    if (this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
  }

  log() {
    try {
      return fs.readFileSync(this.logPath, "utf8").slice(-4000);
    } catch {
      return "";
    }
  }
}

/** Certificates made with Debian's openssl CLI, as tests/e2e/tls_certs.h does: EC P-256 keys. */
class TestPki {
  constructor(dir = tempDir("sundial-node-pki-")) {
    this.dir = dir;
  }

  path(file) {
    return path.join(this.dir, file);
  }

  cert(name) {
    return this.path(`${name}.pem`);
  }

  key(name) {
    return this.path(`${name}.key`);
  }

  /** A self-signed CA: NAME.pem and NAME.key. */
  makeCa(name) {
    openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", this.key(name),
      "-out", this.cert(name), "-days", "2", "-subj", `/CN=${name}`, "-addext", "basicConstraints=critical,CA:TRUE",
      "-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    return this;
  }

  /** A server certificate signed by `ca`, naming `altNames` (subjectAltName syntax). */
  makeServer(name, ca, altNames = "DNS:localhost,IP:127.0.0.1") {
    const ext = this.path(`${name}.ext`);
    fs.writeFileSync(ext, `subjectAltName=${altNames}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
    openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", this.key(name),
      "-out", this.path(`${name}.csr`), "-subj", `/CN=${name}`]);
    openssl(["x509", "-req", "-in", this.path(`${name}.csr`), "-CA", this.cert(ca), "-CAkey", this.key(ca), "-CAcreateserial",
      "-out", this.cert(name), "-days", "2", "-extfile", ext]);
    return this;
  }
}

function openssl(args) {
  const result = childProcess.spawnSync("openssl", args, { encoding: "utf8" });
  if (result.status !== 0) assert.fail(`openssl ${args.join(" ")} failed: ${result.error ?? ""}${result.stderr}`);
}

/** The environment for a child node process that must require("sundial-client") as this one does. */
function childEnv(extra = {}) {
  const packageDir = path.dirname(require.resolve("sundial-client/package.json"));
  const nodePath = [path.join(packageDir, "node_modules"), process.env.NODE_PATH].filter(Boolean).join(path.delimiter);
  return { ...process.env, NODE_PATH: nodePath, ...extra };
}

/** Rejects with the SundialError of `promise`, checked against `expected` ({code, origin, message: RegExp}). */
async function rejectsWith(promise, expected) {
  const { SundialError } = require("sundial-client");
  let error = null;
  try {
    await promise;
  } catch (e) {
    error = e;
  }
  assert.ok(error !== null, `expected a SundialError ${expected.code}, but it resolved`);
  assert.ok(error instanceof SundialError, `expected a SundialError, got ${error && error.stack}`);
  if (expected.code) assert.equal(error.code, expected.code, String(error));
  if (expected.origin) assert.equal(error.origin, expected.origin, String(error));
  if (expected.message) assert.match(error.message, expected.message);
  return error;
}

/** A Worker running (no signal handlers, no log); `.done` settles when run() does. */
function startWorker(addr, queue, handler, options = {}) {
  const { Worker } = require("sundial-client");
  const w = new Worker(addr, queue, handler, { handle_signals: false, logger: null, ...options });
  w.done = w.run();
  w.done.catch(() => undefined); // read by the tests that expect it
  return w;
}

/** Stops a Worker of startWorker and waits for run() to settle. */
async function stopWorker(w) {
  w.stop();
  await w.done;
}

/** The server's count of answered requests of operation `op` (GET /metrics on `httpAddr`). */
async function answeredRequests(httpAddr, op) {
  const text = await (await fetch(`http://${httpAddr}/metrics`)).text();
  let total = 0;
  const pattern = new RegExp(`^sundial_operations_total\\{op="${op}",code="[A-Z_]+"\\} (\\d+)$`, "gm");
  for (const [, n] of text.matchAll(pattern)) total += Number(n);
  return total;
}

/**
 * One sundiald and one Client for a test file: started before its first test, closed after its
 * last. `bind(server, client)` hands them to the file's variables once they exist.
 */
function useServer(bind, { timeout_ms = 20_000 } = {}) {
  const { after, before } = require("node:test");
  const { Client } = require("sundial-client");
  let server;
  let client;
  before(async () => {
    server = await new Server().start();
    client = new Client(server.addr, { timeout_ms });
    bind(server, client);
  });
  after(async () => {
    await client.close();
    await server.stop();
  });
}

module.exports = {
  useServer,
  answeredRequests,
  startWorker,
  stopWorker,
  FIXED_PORTS,
  ROOT,
  START_TIMEOUT_MS,
  SUNDIALD,
  Server,
  TestPki,
  childEnv,
  delay,
  portIsFree,
  rejectsWith,
  tempDir,
  uniqueQueue,
  waitFor,
};
