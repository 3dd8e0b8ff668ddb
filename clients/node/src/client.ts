// Client: the promise-based, pipelined client of sundiald's binary TCP protocol
// (docs/clients/typescript.md has the user's view; docs/protocol.md the wire).
//
// One connection, shared by every call: each call writes its request and awaits its own reply,
// matched by request_id, so any number are in flight and a long-poll dequeue holds back nobody.
// enqueueBatch and completeBatch send their requests of 1000 items back to back.
//
// Connecting is lazy and repeated, with the Python client's rules: the first call connects;
// after the connection is lost the next call connects again, retrying with backoff (50 ms
// doubling to 2 s, jittered) until that call's deadline, trying the addresses in turn. Requests
// that were never written, and reads, are sent again on the new connection; a mutation that was
// written when the connection broke fails with UNAVAILABLE (origin "connection"): it may or may
// not have been applied, and only the caller knows whether repeating it is safe. A refused token
// or certificate fails at once (no retry fixes it).
//
// Deadlines: every call has one (timeout_ms, default the client's, plus a long poll's wait_ms).
// When it passes the call fails with UNAVAILABLE; the connection stays open and a late reply is
// dropped.
//
// Clusters (docs/clients/typescript.md#clusters): given two or more distinct addresses the client
// follows the cluster's primary, by the Python client's rules (follow.ts). It finds the primary
// with the Cluster request (the node that says it is the primary, at an epoch no older than any
// seen; a node that names another sends the client there) and sends every call there. On
// NOT_PRIMARY, a lost connection, a call past its deadline or the server's UNAVAILABLE it looks
// again and sends the call again, with a jittered backoff, until retry_budget_ms (default 20 s)
// after the call began; then it rejects with the last error, its message saying so. A refusal
// with NOT_PRIMARY is always sent again (nothing was applied); after an unknown outcome only a
// Call whose `resend` allows it (reads, enqueues with ids, complete/fail/extend with their
// tokens, dequeues, cancels; not deleteQueue, redrive or switchover). Enqueued messages without
// an id get one of the client's own (codec.newMessageId), so a resend is a duplicate, never a
// second message. Batches are sent one request after the other, each followed like a call.

import {
  Address,
  DEFAULT_HTTP_PORT,
  formatAddress,
  parseAddress,
  parseAddresses,
} from "./address";
import * as codec from "./codec";
import type { Batch, Call, CompleteItem, Durability, EnqueueItem, NextOptions, Payload, SubscribeOptions } from "./codec";
import { Connection, ConnectError, TransportOptions, openSocket, readCaFile } from "./connection";
import { SundialError, invalidArgument, unavailable } from "./errors";
import * as follow from "./follow";
import type { Target } from "./follow";
import type {
  BrowsePage,
  Cluster,
  Counts,
  EnqueueResult,
  Explanation,
  History,
  KeyInfo,
  KeyLimits,
  KeyOrder,
  FailResult,
  Health,
  Message,
  Metadata,
  NextResult,
  Outcome,
  Queue,
  QueueSettings,
  QueueSettingsUpdate,
  Schedule,
  ScheduleTrigger,
  State,
  Stats,
} from "./records";
import type { Batch as BatchRecord, BatchCallback, FlowNodeResult, MisfirePolicy, OverlapPolicy } from "./records";
import * as flows from "./flows";
import * as scheduling from "./scheduling";
import { Located, Watch } from "./watch";

export const DEFAULT_TIMEOUT_MS = 10_000;
const { RECONNECT_INITIAL_MS, RECONNECT_MAX_MS } = follow;

export interface ClientOptions {
  /** The server's shared token (sundiald --auth-token-file), sent in an Auth request on every new connection. */
  token?: string;
  /** TLS on both ports (sundiald --tls-cert/--tls-key); the certificate must chain to ca_file. */
  tls?: boolean;
  /** PEM CA certificates for the server's certificate; absent: Node's bundled CAs. Implies nothing without `tls`. */
  ca_file?: string;
  /** The name the server's certificate must show; absent: the host of the address. */
  server_name?: string;
  /** The default deadline of a call, in ms (a long poll adds its wait_ms). */
  timeout_ms?: number;
  /** The default of mutating calls: "durable" (after the server's fsync) or "relaxed" (before it). */
  durability?: Durability;
  /**
   * The HTTP/WebSocket port for watch(): "host:port"; absent: the first address's host, port 7401
   * (following a cluster: the primary's, from its Cluster answer).
   */
  http_addr?: string;
  /** Following a cluster (two or more addresses): how long a call may keep retrying, in ms (default 20000). */
  retry_budget_ms?: number;
}

const CLIENT_KEYS = ["token", "tls", "ca_file", "server_name", "timeout_ms", "durability", "http_addr", "retry_budget_ms"] as const;

/** Every method takes timeout_ms (ms; default: the client's). */
export interface CallOptions {
  timeout_ms?: number;
}
/** Mutating methods also take durability. */
export interface MutationOptions extends CallOptions {
  durability?: Durability;
}
export interface EnqueueOptions extends Omit<EnqueueItem, "payload">, MutationOptions {
  /**
   * Up to 60000: the reply comes once the message is terminal (or the time runs out), with its
   * `outcome`; see call().
   */
  wait_ms?: number;
}
/** call(): enqueue's options; timeout_ms (default 30000, at most 60000) is also how long it waits. */
export type CallMessageOptions = Omit<EnqueueOptions, "wait_ms" | "visible_at">;
export interface WaitOptions extends CallOptions {
  /** Up to 60000 (default 0: answer at once with what is terminal so far). */
  wait_ms?: number;
}
export interface GetOptions extends CallOptions {
  /** The message carries its dependencies' outcomes (`dependency_results`). */
  include_dependency_results?: boolean;
}
export interface DequeueOptions extends MutationOptions {
  /** 1–1000 messages (default 1). */
  max?: number;
  /** The lease length; absent: the queue's lease_ms. */
  lease_ms?: number;
  /** Metadata pairs every message must hold (up to 4). */
  filter?: Metadata;
  /** A long poll of up to 60000 ms: answered as soon as a message is dequeueable, else [] at the end. */
  wait_ms?: number;
  /** Each message carries its dependencies' outcomes (`dependency_results`, with their results). */
  include_dependency_results?: boolean;
  /** Who dequeues (up to 128 bytes, e.g. "host/pid"): kept in each leased message's history. */
  worker_id?: string;
}
export interface CompleteOptions extends MutationOptions {
  /**
   * The message's result (a Buffer, or a string sent as UTF-8), stored with it up to the server's
   * --max-result-bytes (64 KiB by default) and read back by get, wait and call.
   */
  result?: Payload;
}
export interface FailOptions extends MutationOptions {
  /** The message's last_error (the server keeps 1 KiB). */
  error?: string;
  /** Retry after this long instead of the queue's backoff. */
  retry_delay_ms?: number;
}
export interface ReprioritizeOptions extends MutationOptions {
  priority?: number | bigint;
  visible_at?: number | bigint;
}
export interface BrowseOptions extends CallOptions {
  state?: State;
  filter?: Metadata;
  cursor?: string;
  /** 1–1000 (default 100). */
  limit?: number;
}
export interface CountOptions extends CallOptions {
  filter?: Metadata;
}
export interface ListKeysOptions extends CallOptions {
  order?: KeyOrder;
  limit?: number;
}
export interface WatchOptions extends SubscribeOptions, CallOptions {}
export interface SwitchoverOptions extends CallOptions {
  /** The node to promote; absent: the synchronous standby. */
  to?: string;
}

/** enqueueFlow's node: enqueue's item with its queue and its children. */
export interface FlowNode extends EnqueueItem {
  queue: string;
  children?: FlowNode[];
}
/** upsertSchedule: exactly one of cron (with tz) and every_ms, and the message each fire enqueues. */
export interface ScheduleSpec extends MutationOptions {
  /** 5 fields or a macro (@daily…), in tz. */
  cron?: string;
  /** An IANA zone for cron (default UTC). */
  tz?: string;
  every_ms?: number | bigint;
  payload?: Payload;
  metadata?: Metadata;
  /** A fire at T enqueues name@T at priority T + this (default 0). */
  priority_offset_ms?: number | bigint;
  /** 0 or absent: the queue's default. */
  max_attempts?: number;
  /** Fires missed while the server was down: "skip" (default), "one" or "all". */
  misfire?: MisfirePolicy;
  /** "allow" (default), or "skip_if_active": no fire while the previous one's message is not terminal. */
  overlap?: OverlapPolicy;
}
export interface CreateBatchOptions extends MutationOptions {
  /** Enqueued once the batch is sealed and no member is active, with x-batch-* counts. */
  callback?: Partial<BatchCallback> & { queue: string };
  /** How long a done batch stays readable (default 3600000). */
  retention_ms?: number | bigint;
}

const CALL_KEYS = ["timeout_ms"] as const;
const MUTATION_KEYS = ["timeout_ms", "durability"] as const;

function now(): number {
  return performance.now();
}

/** enqueue's item options (not payload, given apart). */
const ENQUEUE_KEYS = codec.ITEM_KEYS.filter((k) => k !== "payload");

function nonNegative(name: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw invalidArgument(`${name}: must be a number of ms >= 0, not ${String(value)}`);
  }
  return value;
}

function positive(name: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw invalidArgument(`${name}: must be a number of ms above 0, not ${String(value)}`);
  }
  return value;
}

/** Errors after which the connect loop stops at once: retrying cannot fix them. */
const fatalConnectErrors = new WeakSet<SundialError>();

export class Client {
  /** Every address given, in order. */
  readonly addresses: readonly string[];
  private readonly targets: Target[];
  private at: Target; // the address connected to, or to try first
  private readonly seeds: Target[] | null; // following a cluster: its distinct addresses
  private readonly retryBudgetMs: number;
  private onPrimary = false; // following: the connection is the primary's
  private highestEpoch = 0; // following: the highest epoch a node answered with
  private searching: Promise<void> | null = null; // following: the look for the primary under way
  private readonly httpGiven: boolean;
  private readonly token: string | undefined;
  private readonly transport: TransportOptions;
  private readonly timeoutMs: number;
  private readonly durability: Durability;
  private readonly httpAddress: Address;
  private nextId = 1;
  private conn: Connection | null = null;
  private connecting: Promise<Connection> | null = null;
  private connectingDeadline = 0;
  private lastConnectError = "";
  private isClosed = false;
  private readonly sleepers = new Set<() => void>(); // backoffs under way: close() ends them

  /**
   * `addr`: "host:port" (or "host", ":port", "[v6]:port"), a list of them, or "a:7400,b:7400".
   * Bad arguments throw INVALID_ARGUMENT at once; the network is not touched until a call.
   */
  constructor(addr: string | readonly string[] | Address = "127.0.0.1:7400", options: ClientOptions = {}) {
    const o = codec.checkKeys("Client options", options, CLIENT_KEYS);
    const parsed = parseAddresses(addr);
    this.targets = parsed.map((address) => ({ address, text: formatAddress(address) }));
    this.addresses = this.targets.map((target) => target.text);
    this.at = this.targets[0]!;
    this.seeds = follow.clusterSeeds(parsed);
    this.retryBudgetMs =
      o.retry_budget_ms === undefined ? follow.DEFAULT_RETRY_BUDGET_MS : nonNegative("retry_budget_ms", o.retry_budget_ms);
    if (o.token !== undefined && typeof o.token !== "string") throw invalidArgument("token: must be a string");
    this.token = o.token as string | undefined;
    if (o.tls !== undefined && typeof o.tls !== "boolean") throw invalidArgument("tls: must be a boolean");
    if (o.ca_file !== undefined && !o.tls) throw invalidArgument("ca_file: given without tls: true");
    this.transport = {
      tls: o.tls === true,
      ca: o.ca_file === undefined ? undefined : readCaFile(o.ca_file),
      servername: o.server_name === undefined ? undefined : codec.str("server_name", o.server_name),
    };
    this.timeoutMs = o.timeout_ms === undefined ? DEFAULT_TIMEOUT_MS : positive("timeout_ms", o.timeout_ms);
    this.durability = o.durability === undefined ? "durable" : codec.checkDurability(o.durability);
    this.httpGiven = o.http_addr !== undefined;
    this.httpAddress =
      o.http_addr === undefined
        ? { host: this.targets[0]!.address.host, port: DEFAULT_HTTP_PORT }
        : parseAddress(o.http_addr, DEFAULT_HTTP_PORT);
  }

  /** The address in use (or to be tried first); following a cluster, the primary's once found. */
  get address(): string {
    return this.at.text;
  }

  /** Whether a connection is open now (following a cluster: to the primary). */
  get connected(): boolean {
    return this.conn !== null && !this.conn.closed && (this.seeds === null || this.onPrimary);
  }

  /** Whether the client follows a cluster's primary (it was given two or more addresses). */
  get followsPrimary(): boolean {
    return this.seeds !== null;
  }

  /** Closes the connection; calls in flight and later calls fail with UNAVAILABLE. */
  async close(): Promise<void> {
    this.isClosed = true;
    for (const wake of [...this.sleepers]) wake();
    const conn = this.conn;
    this.conn = null;
    conn?.close(unavailable(`${conn.address}: the client is closed`));
  }

  // ---- Queues ------------------------------------------------------------------------------

  /** Creates a queue (docs/semantics.md's settings); again with identical settings: the queue; other ones: ALREADY_EXISTS. */
  createQueue(name: string, settings?: QueueSettings, options?: MutationOptions): Promise<Queue> {
    return this.run(() => codec.createQueue(name, settings), options, MUTATION_KEYS);
  }

  /** Changes the given settings (not type, exclusivity_key or flow_key; dead_letter_queue "" removes it). */
  updateQueue(name: string, settings: QueueSettingsUpdate, options?: MutationOptions): Promise<Queue> {
    return this.run(() => codec.updateQueue(name, settings), options, MUTATION_KEYS);
  }

  getQueue(name: string, options?: CallOptions): Promise<Queue> {
    return this.run(() => codec.getQueue(name), options, CALL_KEYS);
  }

  /** Every queue, sorted by name. */
  listQueues(options?: CallOptions): Promise<Queue[]> {
    return this.run(() => codec.listQueues(), options, CALL_KEYS);
  }

  /** Removes the queue and all its messages. */
  deleteQueue(name: string, options?: MutationOptions): Promise<void> {
    return this.run(() => codec.deleteQueue(name), options, MUTATION_KEYS);
  }

  /** Removes the messages in the given states; resolves with how many. */
  purgeQueue(name: string, states: State | State[], options?: MutationOptions): Promise<number> {
    return this.run(() => codec.purgeQueue(name, states), options, MUTATION_KEYS);
  }

  // ---- Messages ----------------------------------------------------------------------------

  /**
   * Puts one message (a missing queue is created with the defaults). `payload`: a Buffer,
   * Uint8Array or string (sent as UTF-8). Rejects with the item's error.
   */
  enqueue(queue: string, payload?: Payload, options?: EnqueueOptions): Promise<EnqueueResult> {
    return this.runWith(async () => {
      const o = codec.checkKeys("enqueue options", options, [...ENQUEUE_KEYS, "wait_ms", ...MUTATION_KEYS]);
      const item = { ...o, id: o.id ?? this.defaultId(), payload, timeout_ms: undefined, durability: undefined, wait_ms: undefined };
      return this.execute(codec.enqueue(queue, item, o.wait_ms), o.timeout_ms, o.durability);
    });
  }

  /**
   * Request and response in one round trip: enqueues one message and resolves with its Outcome
   * once a worker has finished it (state "completed" with the result the worker's handler
   * returned; "errored" or "canceled" with last_error), or when timeout_ms (default 30000, at most
   * 60000) has passed: then `done` is false and the message runs on; wait() can wait for it again.
   */
  call(queue: string, payload?: Payload, options?: CallMessageOptions): Promise<Outcome> {
    return this.runWith(async () => {
      const o = codec.checkKeys("call options", options, [...ENQUEUE_KEYS.filter((k) => k !== "visible_at"), ...MUTATION_KEYS]);
      const waitMs = o.timeout_ms === undefined ? 30_000 : positive("timeout_ms", o.timeout_ms);
      if (waitMs > codec.MAX_WAIT_MS) throw invalidArgument(`timeout_ms: must be at most ${codec.MAX_WAIT_MS}`);
      const item = { ...o, id: o.id ?? this.defaultId(), payload, timeout_ms: undefined, durability: undefined };
      const enqueue = codec.enqueue(queue, item, Math.ceil(waitMs));
      const call: Call<Outcome> = {
        ...enqueue,
        decode: (response) => {
          const result = enqueue.decode(response);
          if (result.outcome === null) throw new SundialError("INTERNAL", "call: the reply carries no outcome", "connection");
          return result.outcome;
        },
      };
      // The deadline: the wait, plus the client's timeout for the round trip.
      return this.execute(call, undefined, o.durability);
    });
  }

  /**
   * Each message's Outcome once every one is terminal (completed, canceled or errored), or after
   * wait_ms (up to 60000) with what is terminal so far, in the order of `ids` (1 to 1000). An id
   * with no message has its `error` (NOT_FOUND). Results are readable until retention removes
   * the message.
   */
  wait(queue: string, ids: string[], options?: WaitOptions): Promise<Outcome[]> {
    return this.runWith(async () => {
      const o = codec.checkKeys("wait options", options, ["wait_ms", ...CALL_KEYS]);
      return this.execute(codec.wait(queue, ids, o.wait_ms), o.timeout_ms);
    });
  }

  /**
   * Puts many messages, 1000 to a request, the requests pipelined. One EnqueueResult per item,
   * in order; an item the server refused has its SundialError in `.error` (the others are enqueued).
   */
  enqueueBatch(queue: string, items: EnqueueItem[], options?: MutationOptions): Promise<EnqueueResult[]> {
    return this.runWith(async () => {
      const o = codec.checkKeys("enqueueBatch options", options, MUTATION_KEYS);
      let list = items;
      if (this.seeds !== null && Array.isArray(items)) {
        list = items.map((item) =>
          item !== null && typeof item === "object" && (item as EnqueueItem).id == null ? { ...item, id: codec.newMessageId() } : item,
        );
      }
      return this.executeBatch(codec.enqueueBatch(queue, list), o.timeout_ms, o.durability);
    });
  }

  /** Leases up to `max` pending messages, earliest priority first; each `running` with its lease_token. */
  dequeue(queue: string, options?: DequeueOptions): Promise<Message[]> {
    return this.runWith(async () => {
      const o = codec.checkKeys("dequeue options", options, ["max", "lease_ms", "filter", "wait_ms", "include_dependency_results", "worker_id", ...MUTATION_KEYS]);
      const call = codec.dequeue(queue, o.max, o.lease_ms, o.filter, o.wait_ms, o.include_dependency_results, o.worker_id);
      return this.execute(call, o.timeout_ms, o.durability);
    });
  }

  /** Marks a leased message completed. A stale or expired token: FAILED_PRECONDITION; a repeat that succeeded: succeeds. */
  complete(queue: string, id: string, lease_token: number | bigint, options?: CompleteOptions): Promise<void> {
    return this.runWith(async () => {
      const o = codec.checkKeys("complete options", options, ["result", ...MUTATION_KEYS]);
      return this.execute(codec.complete(queue, id, lease_token, o.result), o.timeout_ms, o.durability);
    });
  }

  /** Completes many ({id, lease_token}); per item null (done) or its SundialError. */
  completeBatch(queue: string, items: CompleteItem[], options?: MutationOptions): Promise<(SundialError | null)[]> {
    return this.runWith(async () => {
      const o = codec.checkKeys("completeBatch options", options, MUTATION_KEYS);
      return this.executeBatch(codec.completeBatch(queue, items), o.timeout_ms, o.durability);
    });
  }

  /**
   * Complete-and-next (docs/semantics.md, "Complete-and-next"): completes `items` (up to 1000
   * {id, lease_token, result?}; may be empty) and leases as `next` says ({queue?, max, lease_ms,
   * filter, wait_ms}; its queue absent: this one), in one request, one log group and one reply.
   * Resolves with per-item errors, the leased messages, and next_error when the dequeue was
   * refused; the completions stand either way. With next.wait_ms the reply waits like a long
   * poll when nothing is dequeueable.
   */
  completeAndNext(queue: string, items: CompleteItem[], next: NextOptions = {}, options?: MutationOptions): Promise<NextResult> {
    return this.run(() => codec.completeAndNext(queue, items, next), options, MUTATION_KEYS);
  }

  /**
   * fail with `next`: gives the message back as fail() does and leases as `next` says, in one
   * request. A refused fail rejects with its error and leases nothing.
   */
  failAndNext(queue: string, id: string, lease_token: number | bigint, next: NextOptions = {}, options?: FailOptions): Promise<NextResult> {
    return this.runWith(async () => {
      const o = codec.checkKeys("fail options", options, ["error", "retry_delay_ms", ...MUTATION_KEYS]);
      return this.execute(codec.failAndNext(queue, id, lease_token, o.error, o.retry_delay_ms, next), o.timeout_ms, o.durability);
    });
  }

  /**
   * Gives a leased message back after a failed attempt: `error` becomes its last_error; it is
   * retried after retry_delay_ms or the queue's backoff, or errored (or dead-lettered) when its
   * attempts are spent.
   */
  fail(queue: string, id: string, lease_token: number | bigint, options?: FailOptions): Promise<FailResult> {
    return this.runWith(async () => {
      const o = codec.checkKeys("fail options", options, ["error", "retry_delay_ms", ...MUTATION_KEYS]);
      return this.execute(codec.fail(queue, id, lease_token, o.error, o.retry_delay_ms), o.timeout_ms, o.durability);
    });
  }

  /** The lease now ends lease_ms from now; resolves with the new lease_expires_at. */
  extend(queue: string, id: string, lease_token: number | bigint, lease_ms: number, options?: MutationOptions): Promise<number> {
    return this.run(() => codec.extend(queue, id, lease_token, lease_ms), options, MUTATION_KEYS);
  }

  /** Cancels one message (rejects with its error), a list (per-id errors), or every match of a filter (the count). */
  cancel(queue: string, id: string, options?: MutationOptions): Promise<void>;
  cancel(queue: string, ids: string[], options?: MutationOptions): Promise<(SundialError | null)[]>;
  cancel(queue: string, selector: { filter: Metadata }, options?: MutationOptions): Promise<number>;
  cancel(queue: string, selector: string | string[] | { filter: Metadata }, options?: MutationOptions): Promise<unknown> {
    return this.run(() => codec.cancel(queue, selector), options, MUTATION_KEYS);
  }

  /** Changes an invisible or pending message's priority and/or visible_at (its new version), or every match of a filter (the count). */
  reprioritize(queue: string, id: string, options: ReprioritizeOptions): Promise<number>;
  reprioritize(queue: string, selector: { filter: Metadata }, options: ReprioritizeOptions): Promise<number>;
  reprioritize(queue: string, selector: string | { filter: Metadata }, options: ReprioritizeOptions): Promise<number> {
    return this.runWith(async () => {
      const o = codec.checkKeys("reprioritize options", options, ["priority", "visible_at", ...MUTATION_KEYS]);
      return this.execute(codec.reprioritize(queue, selector, o.priority, o.visible_at), o.timeout_ms, o.durability);
    });
  }

  /** Moves errored messages back to pending (attempts 0): one id, a list, {all: true} or {filter} (the count). */
  redrive(queue: string, id: string, options?: MutationOptions): Promise<void>;
  redrive(queue: string, ids: string[], options?: MutationOptions): Promise<(SundialError | null)[]>;
  redrive(queue: string, selector: { all: true } | { filter: Metadata }, options?: MutationOptions): Promise<number>;
  redrive(
    queue: string,
    selector: string | string[] | { all: true } | { filter: Metadata },
    options?: MutationOptions,
  ): Promise<unknown> {
    return this.run(() => codec.redrive(queue, selector), options, MUTATION_KEYS);
  }

  /** The whole message, in any state until retention removes it. */
  get(queue: string, id: string, options?: GetOptions): Promise<Message> {
    return this.run(() => codec.get(queue, id, options?.include_dependency_results), options, [
      ...CALL_KEYS,
      "include_dependency_results",
    ]);
  }

  /** Messages in one state (default pending), in dequeue order, a page at a time. */
  browse(queue: string, options?: BrowseOptions): Promise<BrowsePage> {
    return this.runWith(async () => {
      const o = codec.checkKeys("browse options", options, ["state", "filter", "cursor", "limit", ...CALL_KEYS]);
      return this.execute(codec.browse(queue, o.state, o.filter, o.cursor, o.limit), o.timeout_ms);
    });
  }

  /** Messages per state, and blocked; with a filter, the matches only. */
  count(queue: string, options?: CountOptions): Promise<Counts> {
    return this.runWith(async () => {
      const o = codec.checkKeys("count options", options, ["filter", ...CALL_KEYS]);
      return this.execute(codec.count(queue, o.filter), o.timeout_ms);
    });
  }

  /**
   * The message's history, oldest first (at most the queue's history_max entries; `dropped`
   * counts the ones left out). NOT_FOUND once the message is gone.
   */
  history(queue: string, id: string, options?: CallOptions): Promise<History> {
    return this.run(() => codec.history(queue, id), options, CALL_KEYS);
  }

  /**
   * Adds a `noted` entry (1–1024 bytes of UTF-8) to the history of a message held under
   * leaseToken; FAILED_PRECONDITION for a lease that is not the current one, or history_max 0.
   */
  note(queue: string, id: string, leaseToken: number | bigint, text: string, options?: MutationOptions): Promise<void> {
    return this.run(() => codec.note(queue, id, leaseToken, text), options, MUTATION_KEYS);
  }

  /**
   * Overrides one flow-key value's limits (docs/semantics.md, "Per-key limits"): the fields
   * given replace its overrides whole ({} removes them). FAILED_PRECONDITION without a flow key.
   */
  setKeyLimits(queue: string, value: string, limits: KeyLimits, options?: MutationOptions): Promise<KeyInfo> {
    return this.run(() => codec.setKeyLimits(queue, value, limits), options, MUTATION_KEYS);
  }

  /** One flow-key value: its overrides, the limits in effect, its messages now. */
  getKeyLimits(queue: string, value: string, options?: CallOptions): Promise<KeyInfo> {
    return this.run(() => codec.getKeyLimits(queue, value), options, CALL_KEYS);
  }

  /** The first `limit` (1–1000, default 20) flow-key values by `order` (default "pending"). */
  listKeys(queue: string, options?: ListKeysOptions): Promise<KeyInfo[]> {
    return this.runWith(async () => {
      const o = codec.checkKeys("listKeys options", options, ["order", "limit", ...CALL_KEYS]);
      return this.execute(codec.listKeys(queue, o.order, o.limit), o.timeout_ms);
    });
  }

  /** Why a message (or a dequeue with {filter}) is or is not dequeueable now. */
  explain(queue: string, selector: string | { filter: Metadata }, options?: CallOptions): Promise<Explanation> {
    return this.run(() => codec.explain(queue, selector), options, CALL_KEYS);
  }

  // ---- Server ------------------------------------------------------------------------------

  stats(options?: CallOptions): Promise<Stats> {
    return this.run(() => codec.stats(), options, CALL_KEYS);
  }

  health(options?: CallOptions): Promise<Health> {
    return this.run(() => codec.health(), options, CALL_KEYS);
  }

  /**
   * A tree of messages across queues (or a list of trees) in one request, all or none: each node
   * (`{queue, children, ...enqueue's item}`) waits until its children have completed. At most 1000
   * nodes and 32 levels. One FlowNodeResult per node in pre-order; a tree whose root id exists
   * with the same content is a resend (`duplicate`).
   */
  enqueueFlow(trees: FlowNode | FlowNode[], options?: MutationOptions): Promise<FlowNodeResult[]> {
    return this.run(() => flows.enqueueFlow(trees), options, MUTATION_KEYS);
  }

  // ---- Schedules (docs/semantics.md, "Schedules") ----------------------------------------------

  /** Creates or replaces schedule (queue, name); `created` is true when it made it. */
  upsertSchedule(queue: string, name: string, spec: ScheduleSpec): Promise<Schedule & { created: boolean }> {
    return this.runWith(async () => {
      const o = codec.checkKeys("schedule", spec, [...scheduling.SCHEDULE_KEYS, ...MUTATION_KEYS]);
      const { timeout_ms, durability, ...rest } = o;
      return this.execute(scheduling.upsertSchedule(queue, name, rest), timeout_ms, durability);
    });
  }

  getSchedule(queue: string, name: string, options?: CallOptions): Promise<Schedule> {
    return this.run(() => scheduling.getSchedule(queue, name), options, CALL_KEYS);
  }

  /** Every schedule of `queue` (absent: of every queue), by queue then name. */
  listSchedules(queue?: string, options?: CallOptions): Promise<Schedule[]> {
    return this.run(() => scheduling.listSchedules(queue), options, CALL_KEYS);
  }

  /** No fire until resumed; the fires due meanwhile are not made. */
  pauseSchedule(queue: string, name: string, options?: MutationOptions): Promise<Schedule> {
    return this.run(() => scheduling.pauseSchedule(queue, name), options, MUTATION_KEYS);
  }

  /** Fires again from now. */
  resumeSchedule(queue: string, name: string, options?: MutationOptions): Promise<Schedule> {
    return this.run(() => scheduling.resumeSchedule(queue, name), options, MUTATION_KEYS);
  }

  /** A fire now (T = the server's time), paused or not. Never resent after an unknown outcome. */
  triggerSchedule(queue: string, name: string, options?: MutationOptions): Promise<ScheduleTrigger> {
    return this.run(() => scheduling.triggerSchedule(queue, name), options, MUTATION_KEYS);
  }

  /** The messages it made stay. Never resent after an unknown outcome. */
  deleteSchedule(queue: string, name: string, options?: MutationOptions): Promise<void> {
    return this.run(() => scheduling.deleteSchedule(queue, name), options, MUTATION_KEYS);
  }

  // ---- Batches (docs/semantics.md, "Batches") --------------------------------------------------

  /**
   * A new open batch; members join with enqueue's `batch`. Repeating it with the same callback and
   * retention answers the batch as it is; with others ALREADY_EXISTS.
   */
  createBatch(id: string, options: CreateBatchOptions = {}): Promise<BatchRecord> {
    return this.runWith(async () => {
      const o = codec.checkKeys("createBatch options", options, ["callback", "retention_ms", ...MUTATION_KEYS]);
      return this.execute(scheduling.createBatch(id, o.callback, o.retention_ms), o.timeout_ms, o.durability);
    });
  }

  /** No member may join any more; done at once (its callback enqueued) when none is active. */
  sealBatch(id: string, options?: MutationOptions): Promise<BatchRecord> {
    return this.run(() => scheduling.sealBatch(id), options, MUTATION_KEYS);
  }

  /** NOT_FOUND when there is none (or it was removed retention_ms after done). */
  getBatch(id: string, options?: CallOptions): Promise<BatchRecord> {
    return this.run(() => scheduling.getBatch(id), options, CALL_KEYS);
  }

  /**
   * The cluster as the node connected to sees it: primary, epoch, sync_standby, members with
   * roles, log positions and lag. Any node answers; a client following a cluster asks the primary
   * when it knows it. A server outside a cluster answers with itself alone (`cluster` is "").
   */
  cluster(options?: CallOptions): Promise<Cluster> {
    return this.run(() => codec.cluster(), options, CALL_KEYS);
  }

  /**
   * A planned change of primary: the primary hands over to `to` (a node name; default the
   * synchronous standby) once it holds every record, and resolves when it has; the new primary
   * then shows in cluster(). Never sent twice by the client.
   */
  switchover(options: SwitchoverOptions = {}): Promise<void> {
    return this.runWith(async () => {
      const o = codec.checkKeys("switchover options", options, ["to", ...CALL_KEYS]);
      return this.execute(codec.switchover(o.to), o.timeout_ms);
    });
  }

  /**
   * Subscribes to a queue's events ("*": every queue) over WebSocket on the HTTP port
   * (docs/protocol.md#subscriptions): an async iterable of MessageEvent and StatsTick.
   */
  watch(queue: string = "*", options: WatchOptions = {}): Watch {
    const o = codec.checkKeys("watch options", options, [...codec.SUBSCRIBE_KEYS, ...CALL_KEYS]);
    const subscribe = codec.subscribe(queue, o as SubscribeOptions);
    const timeoutMs = o.timeout_ms === undefined ? this.timeoutMs : positive("timeout_ms", o.timeout_ms);
    if (this.seeds === null || this.httpGiven) {
      return new Watch(this.httpAddress, this.transport, this.token, subscribe, timeoutMs);
    }
    // Following a cluster: the primary's HTTP port, from its Cluster answer, again after a failover.
    return new Watch(null, this.transport, this.token, subscribe, timeoutMs, {
      locate: (ms) => this.locatePrimaryHttp(ms),
      retryBudgetMs: this.retryBudgetMs,
    });
  }

  private async locatePrimaryHttp(timeoutMs: number): Promise<Located> {
    const view = await this.execute(codec.cluster(), timeoutMs);
    const address = follow.primaryHttp(view);
    if (address === null) {
      throw new SundialError("NOT_PRIMARY", `watch: ${view.node} names no primary with an HTTP address (epoch ${view.epoch})`, "connection");
    }
    return { address, node: view.primary, epoch: view.epoch };
  }

  // ---- Calling -----------------------------------------------------------------------------

  /** Checks the options and runs the Call that `make` builds; argument errors reject the promise. */
  private run<T>(make: () => Call<T>, options: unknown, keys: readonly string[]): Promise<T> {
    return this.runWith(async () => {
      const o = codec.checkKeys("options", options, keys);
      return this.execute(make(), o.timeout_ms, o.durability);
    });
  }

  private async runWith<T>(body: () => Promise<T>): Promise<T> {
    return body();
  }

  /** @internal Sends one Call (again on a new connection when that is safe) and decodes its reply (the Worker's path). */
  async execute<T>(call: Call<T>, timeoutMs?: unknown, durability?: unknown): Promise<T> {
    const timeout = timeoutMs === undefined ? this.timeoutMs : positive("timeout_ms", timeoutMs);
    const d = durability === undefined ? this.durability : codec.checkDurability(durability);
    if (this.seeds !== null) return this.executeFollowing(call, timeout, d);
    const deadline = now() + timeout + call.waitMs;
    for (;;) {
      const conn = this.conn !== null && !this.conn.closed ? this.conn : await this.connection(deadline);
      const id = this.nextId++;
      const outcome = await conn.call(id, codec.encode(call, id, d), deadline - now(), call.name);
      if (outcome.error !== null) {
        const error = outcome.error;
        if (outcome.timedOut) {
          throw unavailable(`${call.name}: no reply from ${conn.address} within ${(timeout + call.waitMs) / 1000} s`);
        }
        const retry =
          error.code === "UNAVAILABLE" && error.origin === "connection" && (!outcome.sent || !call.mutates) && !this.isClosed;
        if (retry && now() < deadline) continue; // not applied, or harmless to repeat: on a new connection
        throw error;
      }
      const refused = codec.replyError(outcome.response!);
      if (refused !== null) throw refused;
      return call.decode(outcome.response!);
    }
  }

  /** Sends every Call of a batch at once on one connection; the first error rejects. */
  private async executeBatch<V, T>(batch: Batch<V, T>, timeoutMs?: unknown, durability?: unknown): Promise<T> {
    const timeout = timeoutMs === undefined ? this.timeoutMs : positive("timeout_ms", timeoutMs);
    const d = durability === undefined ? this.durability : codec.checkDurability(durability);
    if (batch.calls.length === 0) return batch.combine([]);
    if (this.seeds !== null) {
      const values: V[] = [];
      for (const call of batch.calls) values.push(await this.executeFollowing(call, timeout, d));
      return batch.combine(values);
    }
    const deadline = now() + timeout;
    const conn = this.conn !== null && !this.conn.closed ? this.conn : await this.connection(deadline);
    const sent = batch.calls.map((call) => {
      const id = this.nextId++;
      return conn.call(id, codec.encode(call, id, d), deadline - now(), call.name);
    });
    const values: V[] = [];
    for (let i = 0; i < sent.length; i++) {
      const outcome = await sent[i]!;
      if (outcome.error !== null) {
        if (outcome.timedOut) {
          throw unavailable(`${batch.calls[i]!.name}: no reply from ${conn.address} within ${timeout / 1000} s`);
        }
        throw outcome.error;
      }
      const refused = codec.replyError(outcome.response!);
      if (refused !== null) throw refused;
      values.push(batch.calls[i]!.decode(outcome.response!));
    }
    return batch.combine(values);
  }

  /** Following: one Call, to the cluster's primary, sent again by follow.failure's rules. */
  private async executeFollowing<T>(call: Call<T>, timeout: number, durability: Durability): Promise<T> {
    const start = now();
    const giveUp = start + this.retryBudgetMs;
    const backoff = new follow.Backoff();
    let hint: string | null = null;
    for (let tries = 1; ; tries++) {
      const conn = await this.primaryConnection(Math.max(giveUp, now() + timeout), call.anyNode, hint);
      const id = this.nextId++;
      const outcome = await conn.call(id, codec.encode(call, id, durability), timeout + call.waitMs, call.name);
      let error: SundialError;
      let retry: follow.Retry;
      if (outcome.error !== null) {
        error = outcome.error;
        retry = follow.failure(call, error, { sent: outcome.sent, fromServer: false, address: conn.address });
        if (outcome.timedOut) conn.close(error); // a node that stopped answering: look again
      } else {
        const refused = codec.replyError(outcome.response!);
        if (refused === null) return call.decode(outcome.response!);
        error = refused;
        retry = follow.failure(call, error, { sent: true, fromServer: true, address: conn.address });
      }
      if (retry.lost && this.conn === conn) this.onPrimary = false;
      if (!retry.again) throw error;
      hint = retry.hint;
      const t = now();
      if (t >= giveUp || this.isClosed) throw follow.gaveUp(error, tries, t - start);
      if (hint === null) await this.sleep(backoff.next(giveUp - t));
    }
  }

  /** The id of an enqueued message given none: one of the client's own when following (a resend is a duplicate). */
  private defaultId(): string | undefined {
    return this.seeds === null ? undefined : codec.newMessageId();
  }

  /** Waits `ms`; close() cuts it short. */
  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.sleepers.add(wake);
    });
  }

  // ---- Following a cluster's primary -------------------------------------------------------

  private primaryReady(anyNode: boolean): boolean {
    return this.conn !== null && !this.conn.closed && (this.onPrimary || anyNode);
  }

  /**
   * Following: the connection to the primary (with `anyNode`, to any node that answers), looked
   * for with backoff until `deadline`; first at `hint`, where a node said the primary is. Rejects
   * with the last error (NOT_PRIMARY: nodes answer but none leads; UNAVAILABLE: none answers).
   * Calls at once share one look.
   */
  private async primaryConnection(deadline: number, anyNode: boolean, hint: string | null): Promise<Connection> {
    const backoff = new follow.Backoff();
    for (;;) {
      if (this.isClosed) throw unavailable(`${this.address}: the client is closed`);
      if (this.primaryReady(anyNode)) return this.conn!;
      let last: SundialError | null = null;
      if (this.searching === null) {
        const search = this.findPrimary(deadline, hint);
        this.searching = search;
        const clear = () => {
          if (this.searching === search) this.searching = null;
        };
        search.then(clear, clear);
      }
      try {
        await withDeadline(this.searching, deadline, () => unavailable(`${this.address}: no primary found before the deadline`));
      } catch (e) {
        if (!(e instanceof SundialError)) throw e;
        if (fatalConnectErrors.has(e) || e.code === "UNAUTHENTICATED") throw e;
        last = e;
      }
      hint = null;
      if (this.primaryReady(anyNode)) return this.conn!;
      const remaining = deadline - now();
      if (remaining <= 0) throw last ?? unavailable(`${this.address}: no primary`);
      await this.sleep(backoff.next(remaining));
    }
  }

  /** The Cluster answer of the node at the other end of `conn`. */
  private async askCluster(conn: Connection, deadline: number): Promise<Cluster> {
    const call = codec.cluster();
    const id = this.nextId++;
    const outcome = await conn.call(id, codec.encode(call, id, "durable"), deadline - now(), call.name);
    if (outcome.error !== null) throw outcome.error;
    const refused = codec.replyError(outcome.response!);
    if (refused !== null) throw refused;
    return call.decode(outcome.response!);
  }

  /** How long one node may take to connect and answer Cluster: the client's timeout, within `deadline`. */
  private askDeadline(deadline: number): number {
    return Math.min(deadline, now() + this.timeoutMs);
  }

  /**
   * One look for the primary (follow.PrimarySearch): the node connected to (unless a node named
   * another), then `hint`, the seeds and any primary a node names. Adopts the primary's
   * connection; while none leads, a connection to a node that answered (for cluster()). Rejects
   * when no node answers as the primary.
   */
  private async findPrimary(deadline: number, hint: string | null): Promise<void> {
    this.onPrimary = false;
    const search = new follow.PrimarySearch(this.seeds!, this.highestEpoch, hint);
    let current = this.conn !== null && !this.conn.closed ? this.conn : null;
    if (current !== null && hint === null) {
      try {
        const view = await this.askCluster(current, this.askDeadline(deadline));
        const primary = search.answered(view);
        this.highestEpoch = search.highestEpoch;
        if (primary) {
          this.onPrimary = this.conn === current && !current.closed;
          if (this.onPrimary) return;
        }
      } catch (e) {
        if (!(e instanceof SundialError)) throw e;
        search.failed(e);
        current.close();
        if (this.conn === current) this.conn = null;
        current = null;
      }
    }
    search.addSeeds();
    for (let k = 0; k < search.order.length; k++) {
      const target = search.order[k]!; // the order grows while it is walked
      if (this.isClosed) break;
      if (current !== null && hint === null && target.text === this.at.text) continue; // asked above
      let conn: Connection;
      try {
        conn = await this.connectTo(target, this.askDeadline(deadline) - now());
      } catch (e) {
        if (e instanceof ConnectError) {
          if (e.fatal) throw fatal(unavailable(e.message));
          search.failed(unavailable(e.message));
          continue;
        }
        throw e; // UNAUTHENTICATED: no other node will take the token either
      }
      let view: Cluster;
      try {
        view = await this.askCluster(conn, this.askDeadline(deadline));
      } catch (e) {
        conn.close();
        if (!(e instanceof SundialError)) throw e;
        search.failed(e);
        continue;
      }
      const primary = search.answered(view);
      this.highestEpoch = search.highestEpoch;
      if (this.isClosed) {
        conn.close();
        break;
      }
      if (primary || current === null) {
        // The primary; or, while none is known, a node that answers.
        if (this.conn !== null && this.conn !== conn) this.conn.close();
        this.conn = current = conn;
        this.at = target;
      } else {
        conn.close();
      }
      if (primary) {
        this.onPrimary = true;
        return;
      }
    }
    throw search.error();
  }

  // ---- Connecting --------------------------------------------------------------------------

  /** The live connection, made (with backoff) if there is none, by `deadline`. */
  private async connection(deadline: number): Promise<Connection> {
    for (;;) {
      if (this.isClosed) throw unavailable(`${this.address}: the client is closed`);
      if (this.conn !== null && !this.conn.closed) return this.conn;
      if (this.connecting === null) {
        const attempt = this.connectLoop(deadline);
        this.connecting = attempt;
        this.connectingDeadline = deadline;
        const clear = () => {
          if (this.connecting === attempt) this.connecting = null;
        };
        attempt.then(clear, clear);
      }
      try {
        // The attempt ends by its own deadline; a call with an earlier one stops waiting sooner.
        if (deadline >= this.connectingDeadline) return await this.connecting;
        return await withDeadline(this.connecting, deadline, () =>
          unavailable(`${this.address}: cannot connect: ${this.lastConnectError || "the deadline passed"}`),
        );
      } catch (e) {
        // Another call's attempt may have ended at its own, earlier deadline: try again by ours.
        if (fatalConnectErrors.has(e as SundialError) || now() >= deadline || this.isClosed) throw e;
      }
    }
  }

  private async connectLoop(deadline: number): Promise<Connection> {
    let delay = RECONNECT_INITIAL_MS;
    let last = "";
    for (;;) {
      for (let k = 0; k < this.targets.length; k++) {
        if (this.isClosed) throw unavailable(`${this.address}: the client is closed`);
        const start = this.targets.indexOf(this.at);
        const target = this.targets[(start + k) % this.targets.length]!;
        const remaining = deadline - now();
        if (remaining <= 0) throw unavailable(last || `${target.text}: cannot connect: the deadline passed`);
        try {
          const conn = await this.connectTo(target, remaining);
          if (this.isClosed) {
            conn.close();
            throw unavailable(`${this.address}: the client is closed`);
          }
          this.at = target;
          this.conn = conn;
          return conn;
        } catch (e) {
          if (e instanceof ConnectError) {
            if (e.fatal) throw fatal(unavailable(e.message));
            last = e.message;
            this.lastConnectError = last;
          } else {
            throw e;
          }
        }
      }
      const remaining = deadline - now();
      if (remaining <= 0) throw unavailable(last || `${this.address}: cannot connect: the deadline passed`);
      // Backoff with jitter, bounded by the deadline; close() cuts it short.
      await this.sleep(Math.min(delay * (0.5 + Math.random() / 2), remaining));
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  }

  /** One connection to `target`, authenticated; ConnectError when it cannot be made. */
  private async connectTo(target: Target, timeoutMs: number): Promise<Connection> {
    const start = now();
    const socket = await openSocket(target.address, this.transport, Math.max(timeoutMs, 1));
    const conn = new Connection(socket, target.text);
    if (this.token === undefined) return conn;
    const id = this.nextId++;
    const outcome = await conn.call(id, codec.encode(codec.auth(this.token), id, "durable"), timeoutMs - (now() - start), "auth");
    const error = outcome.error ?? codec.replyError(outcome.response!);
    if (error === null) return conn;
    conn.close();
    // A refused token is the server's word (with request_id 0 it closes the connection too).
    if (error.code === "UNAUTHENTICATED") throw fatal(error);
    throw new ConnectError(error.message, false);
  }
}

function fatal(error: SundialError): SundialError {
  fatalConnectErrors.add(error);
  return error;
}

/** `promise`, or the error of `onTimeout()` once `deadline` (performance.now() ms) passes. */
function withDeadline<T>(promise: Promise<T>, deadline: number, onTimeout: () => Error): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(onTimeout()), Math.max(deadline - now(), 0));
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
