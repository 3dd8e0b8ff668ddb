#!/usr/bin/env node
// The TypeScript client's throughput beside the Python client's, measured in the same run
// against the same server (issue 26; docs/BENCHMARKS.md, "TypeScript client and worker").
//
//   make build
//   flock /work/.bench.lock node clients/node/bench/node_bench.js [--rounds 3] [--jobs 20000]
//                [--enqueue-messages 200000] [--concurrency 8] [--skip-python]
//
// Starts sundiald --fsync=always (durable: a reply means fsynced) on free loopback ports in a
// temp dir, then, per round, the same shapes as clients/python/bench/python_bench.py:
//
//   enqueue    one process, one Client: --enqueue-messages messages of 100 bytes with
//              enqueueBatch (10,000 items per call: 10 requests of 1000, pipelined); then a
//              quarter as many single enqueue() calls from 8 concurrent loops on one Client
//              (8 in flight, as Python's 8 threads), and the same with 256 in flight.
//   worker     --jobs no-op jobs prefilled (untimed), then a Worker with concurrency 8 and a
//              no-op handler until the server has acknowledged every complete; jobs/s from the
//              first handler call to the last acknowledged complete (the worker's counter, read
//              every 10 ms). Once with prefetch 0 (the default), once with prefetch 8.
//   python     the same shapes with the Python client (python_bench.py's functions, in a
//              python3 child process, against the same server, right after the Node ones).
//
// Every figure is the median over the rounds. Uses the package built in
// build/release/clients/node ($SUNDIAL_CLIENT to use another) and build/release/server/sundiald
// ($SUNDIALD); prints a markdown report on stdout, progress on stderr.
"use strict";

const childProcess = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..", "..", "..");
const CLIENT = process.env.SUNDIAL_CLIENT || path.join(ROOT, "build", "release", "clients", "node");
const SUNDIALD = process.env.SUNDIALD || path.join(ROOT, "build", "release", "server", "sundiald");
const PYTHON_BENCH = path.join(ROOT, "clients", "python", "bench");
const PAYLOAD = Buffer.alloc(100, "x");

const { Client, Worker } = require(CLIENT);

function parseArgs(argv) {
  const args = { rounds: 3, jobs: 20000, "enqueue-messages": 200000, concurrency: 8, "skip-python": false };
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, "");
    if (!(key in args)) throw new Error(`node_bench: unknown argument ${argv[i]}`);
    if (typeof args[key] === "boolean") args[key] = true;
    else args[key] = Number(argv[++i]);
  }
  return args;
}

/** This process's CPU time per job in the worker rows (µs; the prefill is before the window). */
const cpuPerJob = { worker: [], prefetch: [] };
const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let queueNumber = 0;
const queueName = (prefix) => `${prefix}-${process.pid}-${++queueNumber}`;

async function startServer(workdir) {
  const ready = path.join(workdir, "sundiald.ready");
  const args = ["--data-dir", path.join(workdir, "sundial"), "--port", "0", "--http-port", "0", "--ready-file", ready, "--fsync=always"];
  const log = fs.openSync(path.join(workdir, "sundiald.log"), "w");
  const proc = childProcess.spawn(SUNDIALD, args, { stdio: ["ignore", log, log] });
  const deadline = Date.now() + 30_000;
  while (!fs.existsSync(ready)) {
    if (Date.now() > deadline || proc.exitCode !== null) throw new Error("node_bench: sundiald did not start");
    await delay(10);
  }
  const { port } = JSON.parse(fs.readFileSync(ready, "utf8"));
  return { proc, addr: `127.0.0.1:${port}`, command: [SUNDIALD, ...args].join(" ") };
}

async function benchEnqueueBatch(addr, n) {
  const queue = queueName("enq");
  const c = new Client(addr, { timeout_ms: 120_000 });
  await c.createQueue(queue);
  const items = Array.from({ length: 10000 }, (_, i) => ({ payload: PAYLOAD, priority: i }));
  const start = performance.now();
  for (let sent = 0; sent < n; ) {
    const k = Math.min(10000, n - sent);
    const results = await c.enqueueBatch(queue, k === items.length ? items : items.slice(0, k));
    if (results.length !== k || results[k - 1].error !== null) throw new Error("node_bench: enqueueBatch failed");
    sent += k;
  }
  const elapsed = (performance.now() - start) / 1000;
  if ((await c.count(queue)).pending !== n) throw new Error("node_bench: wrong count after enqueueBatch");
  await c.close();
  return n / elapsed;
}

/** Single enqueue() calls, `inFlight` at a time on one client. */
async function benchEnqueueSingles(addr, n, inFlight) {
  const queue = queueName("enq1");
  const c = new Client(addr, { timeout_ms: 120_000 });
  await c.createQueue(queue);
  const per = Math.floor(n / inFlight);
  const start = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let i = 0; i < per; i++) await c.enqueue(queue, PAYLOAD, { priority: i });
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  if ((await c.count(queue)).pending !== per * inFlight) throw new Error("node_bench: wrong count after enqueue()");
  await c.close();
  return (per * inFlight) / elapsed;
}

async function benchWorker(addr, jobs, concurrency, prefetch) {
  const queue = queueName("work");
  const c = new Client(addr, { timeout_ms: 120_000 });
  await c.createQueue(queue);
  for (let i = 0; i < jobs; i += 10000) {
    await c.enqueueBatch(queue, Array.from({ length: Math.min(10000, jobs - i) }, () => ({ payload: PAYLOAD })));
  }
  let first = null;
  const w = new Worker(addr, queue, () => {
    if (first === null) first = performance.now();
  }, { concurrency, prefetch, handle_signals: false, logger: null });
  const running = w.run();
  const cpuStart = process.cpuUsage();
  while (w.metrics().sundial_worker_completed_total < jobs) await delay(10);
  const end = performance.now();
  const cpu = process.cpuUsage(cpuStart);
  cpuPerJob[prefetch ? "prefetch" : "worker"].push((cpu.user + cpu.system) / jobs);
  w.stop();
  await running;
  if ((await c.count(queue)).completed !== jobs) throw new Error("node_bench: not every job completed");
  await c.close();
  return jobs / ((end - first) / 1000);
}

/** The Python client's figures for the same shapes, from python_bench.py's own functions. */
function benchPython(addr, args) {
  const n = args["enqueue-messages"];
  const code = `
import json, sys
sys.path.insert(0, ${JSON.stringify(PYTHON_BENCH)})
import python_bench as b
out = {
  "batch": b.bench_enqueue_batch(${JSON.stringify(addr)}, ${n}),
  "threads": b.bench_enqueue_threads(${JSON.stringify(addr)}, ${Math.floor(n / 4)}),
  "worker": b.bench_worker(${JSON.stringify(addr)}, ${args.jobs}, ${args.concurrency}),
  "prefetch": b.bench_worker(${JSON.stringify(addr)}, ${args.jobs}, ${args.concurrency}, ${args.concurrency}),
}
print(json.dumps(out))
`;
  const result = childProcess.spawnSync("/usr/bin/python3", ["-c", code], { encoding: "utf8", maxBuffer: 1 << 20 });
  if (result.status !== 0) throw new Error(`node_bench: the Python client's run failed:\n${result.stderr}`);
  return JSON.parse(result.stdout.trim().split("\n").pop());
}

const median = (values) => {
  const s = [...values].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (x) => Math.round(x).toLocaleString("en-US");

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(SUNDIALD)) throw new Error(`node_bench: no ${SUNDIALD}: run make build`);
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), "sundial-node-bench-"));
  const server = await startServer(workdir);
  const rows = { batch: [], singles: [], singles256: [], worker: [], prefetch: [], py_batch: [], py_threads: [], py_worker: [], py_prefetch: [] };
  const loadStart = os.loadavg()[0];
  try {
    for (let r = 0; r < args.rounds; r++) {
      const n = args["enqueue-messages"];
      rows.batch.push(await benchEnqueueBatch(server.addr, n));
      rows.singles.push(await benchEnqueueSingles(server.addr, Math.floor(n / 4), 8));
      rows.singles256.push(await benchEnqueueSingles(server.addr, Math.floor(n / 4), 256));
      rows.worker.push(await benchWorker(server.addr, args.jobs, args.concurrency, 0));
      rows.prefetch.push(await benchWorker(server.addr, args.jobs, args.concurrency, args.concurrency));
      if (!args["skip-python"]) {
        const py = benchPython(server.addr, args);
        rows.py_batch.push(py.batch);
        rows.py_threads.push(py.threads);
        rows.py_worker.push(py.worker);
        rows.py_prefetch.push(py.prefetch);
      }
      const shown = Object.entries(rows).filter(([, v]) => v.length).map(([k, v]) => `${k} ${fmt(v[v.length - 1])}`);
      process.stderr.write(`round ${r + 1}: ${shown.join(", ")}\n`);
    }
  } finally {
    server.proc.kill("SIGTERM");
    await new Promise((resolve) => server.proc.once("exit", resolve));
    fs.rmSync(workdir, { recursive: true, force: true });
  }

  const line = (what, key, pyKey) => {
    const node = `| ${what} | ${fmt(median(rows[key]))} | ${rows[key].map(fmt).join(" / ")} |`;
    if (!pyKey || rows[pyKey].length === 0) return `${node} |`;
    return `${node} ${fmt(median(rows[pyKey]))} (${(median(rows[key]) / median(rows[pyKey])).toFixed(2)}×) |`;
  };
  const c = args.concurrency;
  console.log(
    `Machine: ${os.hostname()}, ${os.cpus().length} cores, Node ${process.version}, load average ` +
      `${loadStart.toFixed(1)} at the start, ${os.loadavg()[0].toFixed(1)} at the end; ${args.rounds} rounds, medians.\n`,
  );
  console.log("| what | TypeScript, median | each round | Python, median (TypeScript / Python) |");
  console.log("| --- | ---: | ---: | ---: |");
  console.log(line("enqueueBatch, 1 process, 1000 per request, 10 requests pipelined (messages/s)", "batch", "py_batch"));
  console.log(line("enqueue(), 8 in flight on one Client (Python: 8 threads) (messages/s)", "singles", "py_threads"));
  console.log(line("enqueue(), 256 in flight on one Client (messages/s)", "singles256", null));
  console.log(line(`Worker, concurrency ${c}, no-op handler (jobs/s)`, "worker", "py_worker"));
  console.log(line(`Worker, concurrency ${c}, prefetch ${c}, no-op handler (jobs/s)`, "prefetch", "py_prefetch"));
  console.log(
    `\nCPU of the TypeScript worker's process per job (user + system, the whole process): ` +
      `${median(cpuPerJob.worker).toFixed(0)} µs with prefetch 0, ${median(cpuPerJob.prefetch).toFixed(0)} µs with prefetch ${c}.`,
  );
  console.log(`\nCommand: ${server.command}`);
}

main().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
