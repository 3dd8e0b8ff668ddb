// Worker: runs an async handler on the messages of one queue, up to `concurrency` at once
// (docs/clients/typescript.md#worker has the user's view).
//
//   new Worker("127.0.0.1:7400", "emails", async (message) => { await send(message); }).run();
//
// - Fetching. Long-polls (poll_ms) for as many messages as it has free handler slots, so at most
//   `concurrency` handlers run and, by default, no message is leased to wait behind another.
//   `prefetch: N` leases up to N more, which wait for a free slot (their leases extended too).
//   A dequeue goes out as soon as a slot frees while no other dequeue is in flight, or when half
//   of the capacity is free (so requests carry several messages). The long polls travel on a
//   connection of their own, so closing it at shutdown drops a waiting poll on the server
//   (nothing is leased for a closed connection: docs/protocol.md#long-polling).
// - Outcome. The handler resolves: the message is completed. It throws (or rejects): the message
//   is failed with the error's text, and the server's retry backoff decides when it comes back
//   (or errors it / moves it to the dead-letter queue when its attempts are spent). Completes
//   and fails travel on a second connection, batched: at most two complete requests are in
//   flight, and what finishes meanwhile goes in the next one. A complete lost with the
//   connection is sent again (it is idempotent for the same lease token).
// - Results. What the handler resolves with is the message's result, sent with its complete: a
//   Buffer, Uint8Array or string as is, undefined or null as none, anything else as JSON (a value
//   JSON cannot encode fails the message, saying so).
// - Complete-and-next. A complete request also asks for as many messages as there are free slots
//   then (its `next`, without a wait: docs/semantics.md, "Complete-and-next"), so a busy worker's
//   loop is one request, one fsync per job; only when that finds nothing does a long poll go out.
// - Leases. While a handler runs, its lease is extended at half-life (BullMQ's rule), by the lease
//   length it was dequeued with; one timer serves every job (the earliest due). An extend refused
//   with a stale token means the lease was lost (it expired while the server was unreachable, or
//   the message was canceled): logged, counted, on_lease_lost called, not retried, and the
//   handler's outcome is not sent (the message belongs to someone else now).
// - Shutdown. SIGTERM, SIGINT (while run() runs, unless handle_signals is false) or stop():
//   fetching stops at once; messages leased but not started are given back (their lease set to
//   end now, an extend to 1 ms: SQS's visibility 0; the attempt stays spent); running handlers
//   get shutdown_timeout_ms to finish and their outcomes are sent; then run() resolves. A
//   handler still running after the timeout is left to its lease (no more extends, its outcome
//   not sent: the message comes back when the lease ends). A second signal skips the waits.
//   After a signal's shutdown that left handlers running, the process exits (code 0) a second
//   after run() resolves if those handlers still keep it alive.
// - Reconnects. Both connections reconnect by themselves (Client); a failed fetch is retried
//   after a backoff (0.1 s doubling to 5 s), so a restarted server is picked up again.
//
// Handlers share the event loop: they must not block it (CPU-heavy work belongs in a
// worker_threads pool), or leases cannot be extended meanwhile.

import { hostname } from "os";

import { Address } from "./address";
import { Client, ClientOptions } from "./client";
import * as codec from "./codec";
import type { Payload } from "./codec";
import { SundialError, invalidArgument } from "./errors";
import type { Message, Metadata } from "./records";

const MAX_ERROR_BYTES = 1024; // the server keeps this much of last_error
const ACKS_IN_FLIGHT = 2; // complete requests in flight at once; the rest wait and batch up
const BACKOFF_INITIAL_MS = 100;
const BACKOFF_MAX_MS = 5_000;
const ACK_GRACE_MS = 10_000; // after the handlers, how long shutdown waits for their outcomes to be sent
const EXIT_GRACE_MS = 1_000; // after a signal's shutdown that left handlers running (see run())
const FATAL_FETCH_CODES = new Set(["INVALID_ARGUMENT", "UNAUTHENTICATED"]);
const LOST_LEASE_CODES = new Set(["FAILED_PRECONDITION", "NOT_FOUND"]);

/** The counters of metrics(), with their help text. */
export const COUNTERS = {
  leased: "messages leased by this worker",
  completed: "messages completed (the server acknowledged the complete)",
  failed: "messages failed by a handler error (the server acknowledged the fail)",
  extended: "lease extensions acknowledged",
  lease_lost: "messages whose lease was lost while or after the handler ran",
  abandoned: "handlers still running at the end of the shutdown timeout",
  released: "messages leased but not started at shutdown, given back to the queue",
  ack_errors: "completes and fails the server refused for another reason",
  fetch_errors: "dequeues that failed (connection lost, server unavailable)",
} as const;
type Counter = keyof typeof COUNTERS;

/** Where the worker logs: any object with these methods (console works). */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** The default: one line per record on stderr. */
const STDERR_LOGGER: Logger = {
  info: (message) => process.stderr.write(`sundial.worker INFO ${message}\n`),
  warn: (message) => process.stderr.write(`sundial.worker WARNING ${message}\n`),
  error: (message) => process.stderr.write(`sundial.worker ERROR ${message}\n`),
};

export type Handler = (message: Message) => unknown;

export interface WorkerOptions extends Pick<ClientOptions, "token" | "tls" | "ca_file" | "server_name"> {
  /** Handlers running at once, 1–1000 (default 8). */
  concurrency?: number;
  /** Lease length of each dequeue; absent: the queue's lease_ms. */
  lease_ms?: number;
  /** Only messages whose metadata holds these pairs (up to 4). */
  filter?: Metadata;
  /** How long shutdown waits for running handlers (default 25000, as Sidekiq and Faktory). */
  shutdown_timeout_ms?: number;
  /** Messages leased beyond the running ones, waiting for a free slot (default 0). */
  prefetch?: number;
  /** Long-poll length, 1–60000 ms (default 20000). */
  poll_ms?: number;
  /** Called after the handler threw (before the fail is sent). */
  on_error?: (message: Message, error: unknown) => void;
  /** Called when a message's lease was found lost. */
  on_lease_lost?: (message: Message) => void;
  /** SIGTERM and SIGINT stop the worker while run() runs (default true). */
  handle_signals?: boolean;
  /** Where to log (default: stderr); null: nowhere. */
  logger?: Logger | null;
  /** Each message carries its dependencies' outcomes (`dependency_results`; default false). */
  include_dependency_results?: boolean;
  /** Who leases, kept in the history of every message it leases (≤ 128 bytes; default "host/pid"). */
  worker_id?: string;
}

const WORKER_KEYS = [
  "concurrency",
  "lease_ms",
  "filter",
  "shutdown_timeout_ms",
  "prefetch",
  "poll_ms",
  "on_error",
  "on_lease_lost",
  "handle_signals",
  "logger",
  "include_dependency_results",
  "worker_id",
  "token",
  "tls",
  "ca_file",
  "server_name",
] as const;

const SILENT: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** `Name: message`, cut to the server's 1 KiB of last_error on a UTF-8 boundary. */
export function errorText(error: unknown): string {
  let text: string;
  if (error instanceof Error) {
    text = error.message ? `${error.name}: ${error.message}` : error.name;
  } else {
    try {
      text = String(error);
    } catch {
      text = "(a value that cannot be shown was thrown)";
    }
  }
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length <= MAX_ERROR_BYTES) return text;
  let end = MAX_ERROR_BYTES;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--; // not inside a character
  return bytes.subarray(0, end).toString("utf8");
}

function now(): number {
  return performance.now();
}

function integerIn(name: string, value: unknown, low: number, high: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < low || value > high) {
    throw invalidArgument(`${name}: must be an integer in ${low}..${high}, not ${String(value)}`);
  }
  return value;
}

/**
 * A handler's resolved value as a result: bytes and strings as they are, undefined and null as
 * none, anything else as JSON; null when it cannot be encoded (the error is thrown).
 */
export function resultBytes(value: unknown): Payload | undefined {
  if (value === undefined || value === null) return undefined;
  if (value instanceof Uint8Array || typeof value === "string") return value;
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError(`a ${typeof value} has no JSON form`);
  return json;
}

/** One leased message on its way through the worker. */
class Job {
  readonly message: Message;
  readonly leaseMs: number;
  due: number; // when the keeper extends it (performance.now() ms)
  extending = false;
  leaseLost = false;
  abandoned = false;
  result: Payload | undefined = undefined;

  constructor(message: Message, received: number) {
    this.message = message;
    const lease = message.lease_expires_at - message.updated_at; // both the server's clock
    this.leaseMs = lease > 0 ? lease : 30_000;
    this.due = received + this.leaseMs / 2;
  }
}

export class Worker {
  readonly queue: string;
  readonly concurrency: number;
  readonly prefetch: number;
  private readonly handler: Handler;
  private readonly capacity: number;
  private readonly leaseMs: number | undefined;
  private readonly filter: Metadata | undefined;
  private readonly shutdownTimeoutMs: number;
  private readonly pollMs: number;
  private readonly onError: WorkerOptions["on_error"];
  private readonly onLeaseLost: WorkerOptions["on_lease_lost"];
  private readonly handleSignals: boolean;
  private readonly log: Logger;
  private readonly dependencyResults: boolean;
  /** @internal who leases, in each message's history. */
  readonly workerId: string;
  /** @internal the long polls' connection. */
  readonly fetchClient: Client;
  /** @internal completes, fails and extends. */
  readonly controlClient: Client;

  private readonly counters: Record<Counter, number>;
  private readonly running = new Set<Job>();
  private readonly waiting: Job[] = []; // leased, not started (prefetch)
  private credits: number; // messages not yet asked for
  /** @internal dequeues in flight (tests wait on it). */
  fetchesInFlight = 0;
  private fetchRetryAt = 0;
  private fetchBackoff = BACKOFF_INITIAL_MS;
  private fetchTimer: NodeJS.Timeout | null = null;
  private stopping = false;
  private stopRequests = 0;
  private stoppedBySignal = false;
  private started = false;
  private fatal: SundialError | null = null;
  private wakeup: (() => void) | null = null;
  private stopRequested: () => void = () => undefined;
  private readonly keeper: LeaseKeeper;
  private readonly acker: Acker;

  constructor(addr: string | readonly string[] | Address, queue: string, handler: Handler, options: WorkerOptions = {}) {
    const o = codec.checkKeys("Worker options", options, WORKER_KEYS);
    if (typeof handler !== "function") throw invalidArgument("handler: must be a function (it receives a Message)");
    this.concurrency = o.concurrency === undefined ? 8 : integerIn("concurrency", o.concurrency, 1, 1000);
    this.prefetch = o.prefetch === undefined ? 0 : integerIn("prefetch", o.prefetch, 0, 1000);
    this.pollMs = o.poll_ms === undefined ? 20_000 : integerIn("poll_ms", o.poll_ms, 1, 60_000);
    this.shutdownTimeoutMs =
      o.shutdown_timeout_ms === undefined ? 25_000 : integerIn("shutdown_timeout_ms", o.shutdown_timeout_ms, 0, 86_400_000);
    for (const hook of ["on_error", "on_lease_lost"] as const) {
      if (o[hook] !== undefined && typeof o[hook] !== "function") throw invalidArgument(`${hook}: must be a function`);
    }
    if (o.handle_signals !== undefined && typeof o.handle_signals !== "boolean") {
      throw invalidArgument("handle_signals: must be a boolean");
    }
    // Checks queue, lease_ms and filter now, so that a typo fails here, not at the first fetch.
    this.workerId = o.worker_id !== undefined ? (o.worker_id as string) : `${hostname()}/${process.pid}`.slice(0, 128);
    codec.dequeue(queue, this.concurrency, o.lease_ms, o.filter, this.pollMs, false, this.workerId);
    this.queue = queue;
    this.handler = handler;
    this.capacity = this.concurrency + this.prefetch;
    this.credits = this.capacity;
    this.leaseMs = o.lease_ms as number | undefined;
    this.filter = o.filter as Metadata | undefined;
    this.onError = o.on_error as WorkerOptions["on_error"];
    this.onLeaseLost = o.on_lease_lost as WorkerOptions["on_lease_lost"];
    this.handleSignals = o.handle_signals !== false;
    if (o.include_dependency_results !== undefined && typeof o.include_dependency_results !== "boolean") {
      throw invalidArgument("include_dependency_results: must be a boolean");
    }
    this.dependencyResults = o.include_dependency_results === true;
    this.log = o.logger === null ? SILENT : ((o.logger as Logger | undefined) ?? STDERR_LOGGER);
    const clientOptions: ClientOptions = { token: o.token as string, tls: o.tls as boolean, ca_file: o.ca_file as string };
    if (o.server_name !== undefined) clientOptions.server_name = o.server_name as string;
    for (const key of Object.keys(clientOptions) as (keyof ClientOptions)[]) {
      if (clientOptions[key] === undefined) delete clientOptions[key];
    }
    this.fetchClient = new Client(addr, clientOptions);
    this.controlClient = new Client(addr, clientOptions);
    this.counters = Object.fromEntries(Object.keys(COUNTERS).map((k) => [k, 0])) as Record<Counter, number>;
    this.keeper = new LeaseKeeper(this);
    this.acker = new Acker(this);
  }

  // ---- Public --------------------------------------------------------------------------------

  /**
   * Runs until stop() or a signal; resolves once shut down. Rejects with the SundialError of a
   * fetch that no retry can fix (a bad queue name or filter, a refused token), after shutting down.
   */
  async run(): Promise<void> {
    if (this.started) throw new Error("Worker.run() may be called once");
    this.started = true;
    const restoreSignals = this.installSignalHandlers();
    // A running worker keeps the process alive even while nothing else does (all slots busy
    // with handlers that wait on unreferenced handles).
    const keepAlive = setInterval(() => undefined, 1 << 30);
    const stopped = new Promise<void>((resolve) => {
      this.stopRequested = resolve;
    });
    if (this.stopRequests > 0) this.stopRequested();
    this.log.info(`worker started: queue ${this.queue} on ${this.controlClient.address}, concurrency ${this.concurrency}`, {
      sundial_queue: this.queue,
      concurrency: this.concurrency,
    });
    let abandoned = 0;
    try {
      this.fetchSome();
      await stopped;
      abandoned = await this.shutDown();
    } finally {
      clearInterval(keepAlive);
      restoreSignals();
    }
    if (this.stoppedBySignal && abandoned > 0) {
      // A signal asked the process to end, and handlers still run (left to their leases): if
      // they keep the process alive, it ends anyway, a moment after run() resolves (as the
      // Python worker's daemon threads do). The timer itself keeps nothing alive.
      setTimeout(() => {
        this.log.warn(`${abandoned} handlers still running after a signal's shutdown: exiting`, { sundial_queue: this.queue });
        process.exit(process.exitCode ?? 0);
      }, EXIT_GRACE_MS).unref();
    }
    if (this.fatal !== null) throw this.fatal;
  }

  /** Stops fetching and shuts down (run() resolves). A second call skips waiting for running handlers. */
  stop(): void {
    this.stopRequests++;
    this.stopRequested();
    this.wake();
  }

  /** Counters (`sundial_worker_<name>_total`) and gauges (`sundial_worker_running`, `_concurrency`). */
  metrics(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, value] of Object.entries(this.counters)) out[`sundial_worker_${name}_total`] = value;
    out.sundial_worker_running = this.running.size;
    out.sundial_worker_concurrency = this.concurrency;
    return out;
  }

  /** metrics() in Prometheus' text format, labelled with the queue. */
  prometheusText(): string {
    const label = `{queue="${this.queue.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"}`;
    const lines: string[] = [];
    for (const [name, value] of Object.entries(this.metrics())) {
      const short = name.slice("sundial_worker_".length);
      if (short.endsWith("_total")) {
        lines.push(`# HELP ${name} ${COUNTERS[short.slice(0, -"_total".length) as Counter]}`);
        lines.push(`# TYPE ${name} counter`);
      } else {
        lines.push(`# TYPE ${name} gauge`);
      }
      lines.push(`${name}${label} ${value}`);
    }
    return lines.join("\n") + "\n";
  }

  // ---- Shared with the keeper and the acker --------------------------------------------------

  /** @internal */
  count(name: Counter, n = 1): void {
    this.counters[name] += n;
  }

  /** @internal */
  jobFields(job: Job): Record<string, unknown> {
    const m = job.message;
    return { sundial_queue: this.queue, message_id: m.id, attempts: m.attempts, lease_token: m.lease_token };
  }

  /** @internal */
  logger(): Logger {
    return this.log;
  }

  /** @internal wakes shutdown's waits: something it waits for changed. */
  wake(): void {
    const w = this.wakeup;
    this.wakeup = null;
    w?.();
  }

  /** @internal an extend, complete or fail found that the lease is no longer ours. */
  leaseLost(job: Job, error: SundialError): void {
    if (job.leaseLost) return;
    job.leaseLost = true;
    this.count("lease_lost");
    this.log.warn(`lease of message ${job.message.id} lost: ${error.code}: ${error.message}`, this.jobFields(job));
    if (this.onLeaseLost !== undefined) this.callHook(() => this.onLeaseLost!(job.message));
  }

  /**
   * @internal The free slots a complete may ask for as its `next` (complete-and-next): taken
   * from the credits and counted as a fetch in flight until nextLeased or nextFailed.
   */
  takeNextCredits(): number {
    if (this.stopping || this.credits === 0) return 0;
    const n = Math.min(this.credits, codec.MAX_BATCH);
    this.credits -= n;
    this.fetchesInFlight++;
    return n;
  }

  /** @internal what a complete's `next` leased for the `asked` credits of takeNextCredits. */
  nextLeased(asked: number, messages: Message[]): void {
    this.onFetched(asked, messages);
  }

  /** @internal a complete's `next` leased nothing it can tell (refused, or its reply lost). */
  nextFailed(asked: number): void {
    this.onFetched(asked, []);
  }

  /** @internal the dequeue a complete carries as `next`. */
  nextOptions(max: number): codec.NextOptions {
    const next: codec.NextOptions = { max };
    if (this.dependencyResults) next.include_dependency_results = true;
    if (this.leaseMs !== undefined) next.lease_ms = this.leaseMs;
    if (this.filter !== undefined) next.filter = this.filter;
    if (this.workerId) next.worker_id = this.workerId;
    return next;
  }

  /** @internal is this job's handler still running? */
  isRunning(job: Job): boolean {
    return this.running.has(job) || this.waiting.includes(job);
  }

  // ---- Fetching ------------------------------------------------------------------------------

  /** Asks for messages for the free slots, if the rules allow (see the file's comment). */
  private fetchSome(): void {
    if (this.stopping || this.credits === 0) return;
    if (this.fetchesInFlight > 0 && this.credits * 2 < this.capacity) return;
    const wait = this.fetchRetryAt - now();
    if (wait > 0) {
      if (this.fetchTimer === null) {
        this.fetchTimer = setTimeout(() => {
          this.fetchTimer = null;
          this.fetchSome();
        }, wait);
      }
      return;
    }
    const n = Math.min(this.credits, codec.MAX_BATCH);
    this.credits -= n;
    this.fetchesInFlight++;
    const call = codec.dequeue(this.queue, n, this.leaseMs, this.filter, this.pollMs, this.dependencyResults, this.workerId);
    this.fetchClient.execute(call).then(
      (messages) => this.onFetched(n, messages),
      (error: SundialError) => this.onFetchError(n, error),
    );
  }

  private onFetched(asked: number, messages: Message[]): void {
    this.fetchesInFlight--;
    this.credits += asked - messages.length;
    this.fetchBackoff = BACKOFF_INITIAL_MS;
    const received = now();
    this.count("leased", messages.length);
    for (const message of messages) {
      const job = new Job(message, received);
      if (this.stopping) {
        this.acker.release(job); // leased, not started: given back
      } else if (this.running.size < this.concurrency) {
        this.keeper.add(job);
        this.start(job);
      } else {
        this.keeper.add(job);
        this.waiting.push(job);
      }
    }
    if (this.stopping) this.wake();
    else this.fetchSome();
  }

  private onFetchError(asked: number, error: SundialError): void {
    this.fetchesInFlight--;
    this.credits += asked;
    if (this.stopping) {
      this.wake();
      return;
    }
    this.count("fetch_errors");
    if (FATAL_FETCH_CODES.has(error.code) && error.origin !== "connection") {
      this.log.error(`dequeue from ${this.queue} refused: ${error.code}: ${error.message}; stopping`, { sundial_queue: this.queue });
      this.fatal = error;
      this.stop();
      return;
    }
    const delay = this.fetchBackoff;
    this.fetchRetryAt = now() + delay;
    this.fetchBackoff = Math.min(delay * 2, BACKOFF_MAX_MS);
    this.log.warn(`dequeue from ${this.queue} failed: ${error.code}: ${error.message}; retrying in ${delay / 1000} s`, {
      sundial_queue: this.queue,
    });
    this.fetchSome();
  }

  // ---- Handlers ------------------------------------------------------------------------------

  private start(job: Job): void {
    this.running.add(job);
    let outcome: Promise<unknown>;
    try {
      outcome = Promise.resolve(this.handler(job.message));
    } catch (e) {
      outcome = Promise.reject(e);
    }
    outcome.then(
      (result) => this.finish(job, false, undefined, result),
      (error) => this.finish(job, true, error, undefined),
    );
  }

  private finish(job: Job, failed: boolean, error: unknown, result: unknown): void {
    this.running.delete(job);
    this.keeper.remove(job);
    if (!job.abandoned) {
      this.credits++;
      const next = this.stopping ? undefined : this.waiting.shift();
      if (next !== undefined) this.start(next);
    }
    if (failed) {
      this.log.warn(`handler failed on message ${job.message.id} (attempt ${job.message.attempts}): ${errorText(error)}`, {
        ...this.jobFields(job),
        error,
      });
      if (this.onError !== undefined) this.callHook(() => this.onError!(job.message, error));
    }
    this.wake();
    if (job.abandoned) {
      this.log.info(`handler of message ${job.message.id} finished after the shutdown timeout; its outcome is not sent`, this.jobFields(job));
    } else if (job.leaseLost) {
      this.log.warn(`handler of message ${job.message.id} finished after its lease was lost; its outcome is not sent`, this.jobFields(job));
    } else if (failed) {
      this.acker.fail(job, errorText(error));
    } else {
      let bytes: Payload | undefined | null;
      try {
        bytes = resultBytes(result);
      } catch (e) {
        this.log.warn(`the result of message ${job.message.id} cannot be sent: ${errorText(e)}`, this.jobFields(job));
        this.acker.fail(job, `result: ${errorText(e)}`);
        bytes = null;
      }
      if (bytes !== null) {
        job.result = bytes;
        this.acker.complete(job); // its request asks for the free slots' next messages
      }
    }
    // What the complete did not ask for, a dequeue asks for (by fetchSome's rules).
    if (!job.abandoned) this.fetchSome();
  }

  private callHook(hook: () => void): void {
    try {
      hook();
    } catch (e) {
      this.log.error(`a hook threw: ${errorText(e)}`, { sundial_queue: this.queue });
    }
  }

  // ---- Shutdown ------------------------------------------------------------------------------

  private installSignalHandlers(): () => void {
    if (!this.handleSignals) return () => undefined;
    const onSignal = () => {
      this.stoppedBySignal = true;
      this.stop();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    return () => {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    };
  }

  /** Resolves when `done()` holds, `deadline` passes (false) or a second stop comes (false). */
  private async waitUntil(done: () => boolean, deadline: number): Promise<boolean> {
    for (;;) {
      if (done()) return true;
      const remaining = deadline - now();
      if (remaining <= 0 || this.stopRequests >= 2) return false;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, remaining);
        this.wakeup = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** The shutdown steps of the file's comment; resolves with the number of handlers left running. */
  private async shutDown(): Promise<number> {
    const deadline = now() + this.shutdownTimeoutMs;
    this.log.info(
      `worker stopping: ${this.running.size} handlers running, waiting up to ${this.shutdownTimeoutMs / 1000} s`,
      { sundial_queue: this.queue },
    );
    // 1. No more fetches: a waiting long poll is dropped with its connection.
    this.stopping = true;
    if (this.fetchTimer !== null) clearTimeout(this.fetchTimer);
    await this.fetchClient.close();
    await this.waitUntil(() => this.fetchesInFlight === 0, deadline);
    // 2. Messages not started are given back; running handlers get until the deadline.
    for (const job of this.waiting.splice(0)) {
      this.keeper.remove(job);
      this.acker.release(job);
    }
    await this.waitUntil(() => this.running.size === 0, deadline);
    // 3. Whatever still runs is left to its lease.
    const abandoned = this.running.size;
    for (const job of this.running) {
      job.abandoned = true;
      this.keeper.remove(job);
      this.count("abandoned");
      this.log.warn(
        `handler still running after the shutdown timeout: message ${job.message.id} is left to its lease ` +
          `(expires in at most ${job.leaseMs / 1000} s)`,
        this.jobFields(job),
      );
    }
    this.running.clear();
    // 4. The outcomes of finished handlers are sent.
    this.acker.pump();
    if (!(await this.waitUntil(() => this.acker.idle(), now() + ACK_GRACE_MS))) {
      this.log.warn(`outcomes of ${this.acker.pending()} messages not acknowledged by the server; they come back when their leases end`, {
        sundial_queue: this.queue,
      });
    }
    this.keeper.close();
    this.acker.abort();
    await this.controlClient.close();
    this.log.info("worker stopped", { sundial_queue: this.queue, metrics: this.metrics() });
    return abandoned;
  }
}

/** Extends the lease of every job held at half-life; one timer, set for the earliest due. */
class LeaseKeeper {
  private readonly worker: Worker;
  private readonly jobs = new Set<Job>();
  private timer: NodeJS.Timeout | null = null;
  private timerDue = Infinity;
  private closed = false;

  constructor(worker: Worker) {
    this.worker = worker;
  }

  add(job: Job): void {
    if (this.closed) return;
    this.jobs.add(job);
    if (job.due < this.timerDue) this.schedule();
  }

  remove(job: Job): void {
    this.jobs.delete(job);
  }

  close(): void {
    this.closed = true;
    this.jobs.clear();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private schedule(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.timerDue = Infinity;
    let due = Infinity;
    for (const job of this.jobs) if (!job.extending && job.due < due) due = job.due;
    if (due === Infinity || this.closed) return;
    this.timerDue = due;
    this.timer = setTimeout(() => this.onTimer(), Math.max(due - now(), 0));
  }

  private onTimer(): void {
    this.timer = null;
    this.timerDue = Infinity;
    const t = now();
    const w = this.worker;
    for (const job of this.jobs) {
      if (job.extending || job.due > t) continue;
      job.extending = true;
      const m = job.message;
      w.controlClient
        .execute(codec.extend(w.queue, m.id, m.lease_token, job.leaseMs))
        .then(
          () => this.onExtended(job, null),
          (error: SundialError) => this.onExtended(job, error),
        );
    }
    this.schedule();
  }

  private onExtended(job: Job, error: SundialError | null): void {
    const w = this.worker;
    job.extending = false;
    if (error === null) {
      w.count("extended");
      job.due = now() + job.leaseMs / 2;
    } else if (LOST_LEASE_CODES.has(error.code) && error.origin === "server") {
      const held = this.jobs.delete(job);
      // Not held: the handler finished and its complete overtook this extend.
      if (held) w.leaseLost(job, error);
      return;
    } else {
      // Unreachable or unavailable: try again soon, while the lease may still hold.
      w.logger().warn(`extending the lease of message ${job.message.id} failed: ${error.code}: ${error.message}`, w.jobFields(job));
      job.due = now() + Math.min(1000, job.leaseMs / 4);
    }
    if (this.jobs.has(job) && job.due < this.timerDue) this.schedule();
  }
}

/**
 * Sends the outcomes of finished handlers: completes batched (at most ACKS_IN_FLIGHT requests in
 * flight; what finishes meanwhile waits and goes in the next one), fails and give-backs one by
 * one. After a lost connection they are sent again with a backoff (a complete is idempotent for
 * its token; a repeated fail that had been applied gets FAILED_PRECONDITION, which is logged).
 */
class Acker {
  private readonly worker: Worker;
  private completes: Job[] = [];
  private fails: [Job, string][] = [];
  private releases: Job[] = [];
  private inFlight = 0;
  private retryAt = 0;
  private backoff = BACKOFF_INITIAL_MS;
  private retryTimer: NodeJS.Timeout | null = null;
  private aborted = false;

  constructor(worker: Worker) {
    this.worker = worker;
  }

  complete(job: Job): void {
    this.completes.push(job);
    this.pump();
  }

  fail(job: Job, text: string): void {
    this.fails.push([job, text]);
    this.pump();
  }

  /** Gives back a leased message that was not started: its lease ends now (an extend to 1 ms). */
  release(job: Job): void {
    this.releases.push(job);
    this.pump();
  }

  pending(): number {
    return this.completes.length + this.fails.length + this.releases.length + this.inFlight;
  }

  idle(): boolean {
    return this.pending() === 0;
  }

  abort(): void {
    this.aborted = true;
    this.completes = [];
    this.fails = [];
    this.releases = [];
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
  }

  /** Sends what may go now. */
  pump(): void {
    if (this.aborted) return;
    const wait = this.retryAt - now();
    if (wait > 0) {
      if (this.retryTimer === null) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          this.pump();
        }, wait);
      }
      return;
    }
    const w = this.worker;
    while (this.completes.length > 0 && this.inFlight < ACKS_IN_FLIGHT) {
      const jobs = this.completes.splice(0, codec.MAX_BATCH);
      this.inFlight++;
      const items = jobs.map((j) => ({ id: j.message.id, lease_token: j.message.lease_token, result: j.result }));
      const asked = w.takeNextCredits();
      if (asked === 0) {
        w.controlClient.execute(codec.completeBatch(w.queue, items).calls[0]!).then(
          (results) => this.onCompleted(jobs, results, null),
          (error: SundialError) => this.onCompleted(jobs, [], error),
        );
        continue;
      }
      // Complete-and-next: the free slots' next messages come in the same reply.
      w.controlClient.execute(codec.completeAndNext(w.queue, items, w.nextOptions(asked))).then(
        (reply) => {
          if (reply.next_error !== null) {
            w.logger().warn(`dequeue with complete refused: ${reply.next_error.code}: ${reply.next_error.message}`, { sundial_queue: w.queue });
            w.nextFailed(asked);
          } else {
            w.nextLeased(asked, reply.next);
          }
          this.onCompleted(jobs, reply.errors, null);
        },
        (error: SundialError) => {
          w.nextFailed(asked);
          this.onCompleted(jobs, [], error);
        },
      );
    }
    for (const [job, text] of this.fails.splice(0)) {
      this.inFlight++;
      const m = job.message;
      w.controlClient.execute(codec.fail(w.queue, m.id, m.lease_token, text, undefined)).then(
        (result) => this.onFailed(job, text, result.state, null),
        (error: SundialError) => this.onFailed(job, text, null, error),
      );
    }
    for (const job of this.releases.splice(0)) {
      this.inFlight++;
      const m = job.message;
      w.controlClient.execute(codec.extend(w.queue, m.id, m.lease_token, 1)).then(
        () => this.onReleased(job, null),
        (error: SundialError) => this.onReleased(job, error),
      );
    }
  }

  /** A request answered; resends go back to the front with a backoff. */
  private done(retry?: { completes?: Job[]; fails?: [Job, string][]; releases?: Job[] }): void {
    this.inFlight--;
    if (retry !== undefined) {
      this.completes.unshift(...(retry.completes ?? []));
      this.fails.unshift(...(retry.fails ?? []));
      this.releases.unshift(...(retry.releases ?? []));
      this.retryAt = now() + this.backoff;
      this.backoff = Math.min(this.backoff * 2, BACKOFF_MAX_MS);
    } else {
      this.backoff = BACKOFF_INITIAL_MS;
    }
    this.pump();
    this.worker.wake();
  }

  private onCompleted(jobs: Job[], results: (SundialError | null)[], error: SundialError | null): void {
    const w = this.worker;
    if (error !== null) {
      if (error.code === "UNAVAILABLE" && !this.aborted) {
        w.logger().warn(`complete of ${jobs.length} messages failed: ${error.message}; sending again`, { sundial_queue: w.queue });
        this.done({ completes: jobs });
        return;
      }
      w.count("ack_errors", jobs.length);
      w.logger().error(`complete of ${jobs.length} messages refused: ${error.code}: ${error.message}`, { sundial_queue: w.queue });
      this.done();
      return;
    }
    let completed = 0;
    jobs.forEach((job, i) => {
      const itemError = results[i] ?? null;
      if (itemError === null) {
        completed++;
      } else if (LOST_LEASE_CODES.has(itemError.code)) {
        w.leaseLost(job, itemError);
      } else {
        w.count("ack_errors");
        w.logger().error(`complete of message ${job.message.id} refused: ${itemError.code}: ${itemError.message}`, w.jobFields(job));
      }
    });
    w.count("completed", completed);
    this.done();
  }

  private onFailed(job: Job, text: string, state: string | null, error: SundialError | null): void {
    const w = this.worker;
    if (error === null) {
      w.count("failed");
      w.logger().info(`message ${job.message.id} failed (attempt ${job.message.attempts}): now ${state}`, { ...w.jobFields(job), state });
      this.done();
    } else if (error.code === "UNAVAILABLE" && !this.aborted) {
      this.done({ fails: [[job, text]] });
    } else if (LOST_LEASE_CODES.has(error.code) && error.origin === "server") {
      w.leaseLost(job, error);
      this.done();
    } else {
      w.count("ack_errors");
      w.logger().error(`fail of message ${job.message.id} refused: ${error.code}: ${error.message}`, w.jobFields(job));
      this.done();
    }
  }

  private onReleased(job: Job, error: SundialError | null): void {
    if (error === null) {
      this.worker.count("released");
      this.done();
    } else if (error.code === "UNAVAILABLE" && !this.aborted) {
      this.done({ releases: [job] });
    } else {
      this.done(); // the lease is gone already: nothing to give back
    }
  }
}
