// The examples of docs/clients/typescript.md run as written: compiled together by tsc (so their
// types are checked against the package's .d.ts), then each run in its own node process against
// a server of its own, the addresses replaced, like a user's script.
"use strict";

const assert = require("node:assert/strict");
const childProcess = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { before, test } = require("node:test");

const { Client, SundialError } = require("sundial-client");
const { ROOT, Server, childEnv, tempDir, waitFor } = require("./helpers");

const DOC = path.join(ROOT, "docs", "clients", "typescript.md");
const EXAMPLES = ["worker", "enqueue", "errors", "pipelined", "watch", "exclusive", "results"];

let compiled; // the directory of the compiled examples

function examples() {
  const text = fs.readFileSync(DOC, "utf8");
  const found = {};
  for (const [, name, code] of text.matchAll(/<!-- example: (\w+) -->\n```ts\n([\s\S]*?)```/g)) found[name] = code;
  assert.deepEqual(Object.keys(found).sort(), [...EXAMPLES].sort());
  return found;
}

before(() => {
  const dir = tempDir("sundial-node-docs-");
  const packageDir = path.dirname(require.resolve("sundial-client/package.json"));
  for (const [name, code] of Object.entries(examples())) fs.writeFileSync(path.join(dir, `${name}.ts`), code);
  fs.writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2020",
        module: "commonjs",
        strict: true,
        outDir: "out",
        baseUrl: ".",
        paths: { "sundial-client": [path.join(packageDir, "dist", "index.d.ts")] },
        typeRoots: [path.join(packageDir, "node_modules", "@types")],
        types: ["node"],
      },
      include: ["*.ts"],
    }),
  );
  const tsc = process.env.TSC || "tsc";
  const result = childProcess.spawnSync(tsc, ["-p", dir], { encoding: "utf8" });
  assert.equal(result.status, 0, `${tsc} on the documentation's examples:\n${result.stdout}${result.stderr}${result.error ?? ""}`);
  compiled = path.join(dir, "out");
});

/** An example running in a child process; its output lines collected. */
class Script {
  constructor(name, server) {
    const source = fs.readFileSync(path.join(compiled, `${name}.js`), "utf8");
    const file = path.join(compiled, `${name}-${server.port}.js`);
    fs.writeFileSync(file, source.replaceAll("127.0.0.1:7400", server.addr).replaceAll("127.0.0.1:7401", server.httpAddr));
    this.lines = [];
    this.errors = "";
    this.proc = childProcess.spawn(process.execPath, [file], { env: childEnv(), stdio: ["ignore", "pipe", "pipe"] });
    let partial = "";
    this.proc.stdout.on("data", (d) => {
      partial += d;
      const lines = partial.split("\n");
      partial = lines.pop();
      this.lines.push(...lines);
    });
    this.proc.stderr.on("data", (d) => (this.errors += d));
    this.exit = new Promise((resolve) => this.proc.on("exit", (code, signal) => resolve(code ?? signal)));
    const killer = setTimeout(() => this.proc.kill("SIGKILL"), 60_000); // bounded
    this.exit.then(() => clearTimeout(killer));
  }
}

async function completed(client, queue) {
  try {
    return (await client.count(queue)).completed;
  } catch (e) {
    if (e instanceof SundialError && e.code === "NOT_FOUND") return 0; // not created yet
    throw e;
  }
}

async function withServer(body) {
  const server = await new Server().start();
  const client = new Client(server.addr);
  try {
    await body(server, client);
  } finally {
    await client.close();
    await server.stop();
  }
}

test("the ten-line worker runs what the enqueue example puts, and stops on SIGTERM", () =>
  withServer(async (server, client) => {
    const feeder = new Script("enqueue", server);
    assert.equal(await feeder.exit, 0, feeder.errors);
    assert.match(feeder.lines.join("\n"), /pending: 1/);
    const worker = new Script("worker", server);
    await waitFor(() => worker.lines.includes("to ada@example.com : Welcome!"), { timeout: 30_000, message: "the worker's output" });
    await waitFor(async () => (await completed(client, "emails")) === 1, { message: "completed" });
    worker.proc.kill("SIGTERM");
    assert.equal(await worker.exit, 0, worker.errors);
    assert.match(worker.errors, /worker stopped/);
  }));

test("the errors example sees the lost lease", () =>
  withServer(async (server) => {
    const script = new Script("errors", server);
    assert.equal(await script.exit, 0, script.errors);
    assert.match(script.lines.join("\n"), /^lease lost: /);
  }));

test("the pipelined example completes its 100 messages", () =>
  withServer(async (server) => {
    const script = new Script("pipelined", server);
    assert.equal(await script.exit, 0, script.errors);
    assert.match(script.lines.join("\n"), /completed: 100/);
  }));

test("the watch example prints a message's changes", () =>
  withServer(async (server, client) => {
    const script = new Script("watch", server);
    await waitFor(() => script.lines.includes("watching emails"), { timeout: 30_000, message: "subscribed" });
    await client.enqueue("emails", "hi", { id: "hello" });
    const [m] = await client.dequeue("emails");
    await client.complete("emails", m.id, m.lease_token);
    await waitFor(() => script.lines.includes("hello running -> completed (completed)"), { message: "the events printed" });
    assert.deepEqual(script.lines.filter((l) => l.startsWith("hello ")), [
      "hello pending -> pending (enqueued)",
      "hello pending -> running (leased)",
      "hello running -> completed (completed)",
    ]);
    script.proc.kill("SIGTERM");
    await script.exit;
  }));

test("the exclusive queue and filter example builds the arm64 commits, one per repository at a time", () =>
  withServer(async (server, client) => {
    const script = new Script("exclusive", server);
    await waitFor(async () => (await completed(client, "builds")) === 3, { timeout: 30_000, message: "3 builds" });
    script.proc.kill("SIGTERM");
    assert.equal(await script.exit, 0, script.errors);
    const built = script.lines.filter((l) => l.startsWith("building ")).sort();
    assert.deepEqual(built, ["building api c3", "building web a1", "building web b2"]);
    assert.equal((await client.count("builds")).pending, 1); // d4, x86_64: not this worker's
  }));

test("the results example gets the worker's answer through call()", () =>
  withServer(async (server) => {
    const script = new Script("results", server);
    assert.equal(await script.exit, 0, script.errors);
    assert.deepEqual(script.lines, ['completed {"width":320,"height":240}']);
  }));
