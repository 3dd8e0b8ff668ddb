// A worker in a process of its own, for the signal tests (worker_signals.test.js).
//
//   node worker_process.js ADDR QUEUE MODE SHUTDOWN_TIMEOUT_MS PREFETCH RELEASE_FILE
//
// The handler prints "started ID" on stdout, then, by MODE: "finish" waits for RELEASE_FILE to
// exist and returns; "hang" never returns (a promise that never settles, holding no handle). The
// worker logs to stderr. The exit status is what the tests check: 0 after a SIGTERM.
"use strict";

const fs = require("node:fs");

const { Worker } = require("sundial-client");

async function main() {
  const [addr, queue, mode, shutdownTimeoutMs, prefetch, releaseFile] = process.argv.slice(2);
  const handler = async (message) => {
    process.stdout.write(`started ${message.id}\n`);
    if (mode === "hang") return new Promise(() => undefined);
    const deadline = Date.now() + 60_000;
    while (!fs.existsSync(releaseFile)) {
      // Bounded poll of a file the test creates.
      if (Date.now() > deadline) throw new Error("never released");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return undefined;
  };
  await new Worker(addr, queue, handler, {
    concurrency: 1,
    prefetch: Number(prefetch),
    shutdown_timeout_ms: Number(shutdownTimeoutMs),
  }).run();
  process.stdout.write("run returned\n");
}

main().catch((e) => {
  process.stderr.write(`worker_process: ${e.stack}\n`);
  process.exit(1);
});
