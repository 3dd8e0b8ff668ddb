// Requests and replies of the binary protocol (docs/protocol.md), built and read with the code
// flatc --ts generates from protocol/sundial.fbs (./generated, written at build time).
//
// A request is a Call: the operation, a function that writes its table into a FlatBuffers
// builder, and a function that turns the reply's result table into the value the client method
// returns. The Client only moves Calls over a connection; what each operation sends and returns
// is written once, here. Arguments are checked when the Call is made, so a bad one is
// INVALID_ARGUMENT (origin "local") before anything is sent.
//
// Framing: a u32 little-endian length, then one FlatBuffer. Requests are finished with the file
// identifier "SUND"; replies are ServerMessages.

import * as flatbuffers from "flatbuffers";
import { randomBytes } from "crypto";
import { TextDecoder } from "util";

import { SundialError, codeName, invalidArgument } from "./errors";
import * as P from "./generated";
import {
  BrowsePage,
  Cluster,
  ClusterMember,
  Counts,
  DEPENDENCY_FAILURE_POLICIES,
  DependencyFailurePolicy,
  EXPLAIN_REASONS,
  EnqueueResult,
  Explanation,
  History,
  HistoryEntry,
  KEY_ORDERS,
  KeyInfo,
  KeyLimits,
  FailResult,
  Health,
  Message,
  MessageSummary,
  Metadata,
  NODE_ROLES,
  NextResult,
  Outcome,
  QUEUE_TYPES,
  DEDUPES,
  FAIRNESSES,
  Queue,
  QueueSettings,
  QueueSettingsUpdate,
  QueueStats,
  STATES,
  State,
  Stats,
  WatchEvent,
} from "./records";

export const FILE_IDENTIFIER = "SUND";
/** Largest reply frame accepted (1000 messages of 1 MiB fit), as in the C++ client. */
export const MAX_REPLY_BYTES = 1 << 30;
/** Items per Enqueue / Complete request (docs/protocol.md#requests). */
export const MAX_BATCH = 1000;

export type Durability = "durable" | "relaxed";
const DURABILITIES: Record<Durability, P.Durability> = {
  durable: P.Durability.durable,
  relaxed: P.Durability.relaxed,
};

/** One request: how to build it and how to read its reply. */
export interface Call<T> {
  readonly name: string;
  readonly opType: P.Operation;
  /** Changes state: carries the durability, and is not sent again after a lost connection. */
  readonly mutates: boolean;
  /** How long the server may hold it on purpose (a long poll), added to the deadline. */
  readonly waitMs: number;
  /**
   * Following a cluster's primary: whether the request may be sent again when its outcome is
   * unknown (the connection was lost after it was written, it timed out, the server answered
   * UNAVAILABLE). True for reads and for the writes a repeat cannot harm (an enqueue whose items
   * all have ids, complete/fail/extend with their token, cancel, a dequeue: a lease in a lost reply
   * expires); false for deleteQueue, redrive and switchover.
   */
  readonly resend: boolean;
  /** Any node of a cluster may answer it (cluster), not only the primary. */
  readonly anyNode: boolean;
  build(b: flatbuffers.Builder): flatbuffers.Offset;
  decode(response: P.Response): T;
}

/** Several Calls sent together (pipelined) whose values combine into one. */
export interface Batch<V, T> {
  readonly calls: Call<V>[];
  combine(values: V[]): T;
}

// One builder for every request: encode() runs to completion without yielding, so it is never
// shared by two at once, and reusing it saves allocating a buffer (and the runtime's text
// encoder and decoder) per request; the finished frame is copied out of it.
const builder = new flatbuffers.Builder(1024);

/** The whole frame (length prefix included) of `call` under `requestId`. */
export function encode(call: Call<unknown>, requestId: number, durability: Durability): Uint8Array {
  const b = builder;
  b.clear();
  const op = call.build(b);
  P.Request.startRequest(b);
  P.Request.addRequestId(b, BigInt(requestId));
  if (call.mutates && durability !== "durable") {
    P.Request.addDurability(b, DURABILITIES[durability]);
  }
  P.Request.addOpType(b, call.opType);
  P.Request.addOp(b, op);
  // Not FlatBuffers' own size prefix: that aligns the buffer with the prefix included, so the
  // FlatBuffer after it would be misaligned by 4 and fail the server's Verifier.
  b.finish(P.Request.endRequest(b), FILE_IDENTIFIER);
  const flatbuffer = b.asUint8Array();
  // allocUnsafe takes small frames from Node's pool: no allocation of its own per request.
  const frame = Buffer.allocUnsafe(flatbuffer.length + 4);
  frame.writeUInt32LE(flatbuffer.length, 0);
  frame.set(flatbuffer, 4);
  if (b.dataBuffer().capacity() > MAX_KEPT_BUILDER_BYTES) reset();
  return frame;
}

/** A builder grown by a large request (a batch of big payloads) is not kept. */
const MAX_KEPT_BUILDER_BYTES = 1 << 20;
function reset(): void {
  (builder as unknown as BuilderInternals).bb = flatbuffers.ByteBuffer.allocate(1024);
}

export function checkDurability(value: unknown): Durability {
  if (value === "durable" || value === "relaxed") return value;
  throw invalidArgument(`durability: ${JSON.stringify(value)} is not "durable" or "relaxed"`);
}

// ---- Reading replies ---------------------------------------------------------------------------

/**
 * The Response of one ServerMessage frame body; null for an EventMessage (TCP carries none).
 * FlatBuffers' TypeScript runtime has no Verifier: the structural checks below catch a frame of
 * garbage, and the caller treats the exception as a protocol violation (INTERNAL) and closes the
 * connection; deeper damage inside a well-formed frame is not caught (the server is trusted; the
 * C++ client verifies every frame).
 */
const TEXT_DECODER = new TextDecoder();

/**
 * A ByteBuffer over `frame` that shares one TextDecoder: the runtime's constructor makes one per
 * buffer, a cost paid for every reply.
 */
function byteBuffer(frame: Uint8Array): flatbuffers.ByteBuffer {
  // The fields the runtime's constructor sets (flatbuffers 2.0.7's ByteBuffer), in its order.
  const bb = Object.create(flatbuffers.ByteBuffer.prototype) as { bytes_: Uint8Array; position_: number; text_decoder_: unknown };
  bb.bytes_ = frame;
  bb.position_ = 0;
  bb.text_decoder_ = TEXT_DECODER;
  return bb as unknown as flatbuffers.ByteBuffer;
}

export function readReply(frame: Uint8Array): P.Response | null {
  const body = checkServerMessage(frame);
  const message = P.ServerMessage.getRootAsServerMessage(byteBuffer(frame));
  if (message.bodyType() !== P.ServerBody.Response) return null;
  checkResponse(frame, body);
  return message.body(new P.Response()) as P.Response;
}

// ---- Structural checks -------------------------------------------------------------------------
//
// Without a Verifier, a frame of garbage would be read as zeros and defaults (a typed array
// answers undefined past its end), and a reply could go missing silently. These checks catch
// that: the root, the body and a Response's error and result must be tables whose vtables lie
// inside the frame (FlatBuffers' binary format: a table starts with the signed offset back to its
// vtable; a vtable holds its own size, the table's size, then one u16 offset per field).

function u16(b: Uint8Array, o: number): number {
  return b[o]! | (b[o + 1]! << 8);
}

function i32(b: Uint8Array, o: number): number {
  return b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24);
}

function malformed(what: string): never {
  throw new Error(`not a ServerMessage FlatBuffer (${what})`);
}

function checkTable(b: Uint8Array, pos: number, what: string): number {
  if (pos < 0 || pos + 4 > b.length) malformed(`${what} outside the frame`);
  const vtable = pos - i32(b, pos);
  if (vtable < 0 || vtable + 4 > b.length) malformed(`${what}'s vtable outside the frame`);
  const vtableSize = u16(b, vtable);
  const tableSize = u16(b, vtable + 2);
  if (vtableSize < 4 || vtableSize % 2 !== 0 || vtable + vtableSize > b.length) malformed(`${what}'s vtable size`);
  if (tableSize < 4 || pos + tableSize > b.length) malformed(`${what}'s size`);
  return pos;
}

/** The table a field of the table at `pos` refers to (`slot`: 4 + 2 · field index); -1 when absent. */
function fieldTable(b: Uint8Array, pos: number, slot: number, what: string): number {
  const vtable = pos - i32(b, pos);
  if (slot + 2 > u16(b, vtable)) return -1;
  const offset = u16(b, vtable + slot);
  if (offset === 0) return -1;
  const ref = pos + offset;
  if (ref + 4 > b.length) malformed(`${what} outside the frame`);
  return checkTable(b, ref + (i32(b, ref) >>> 0), what);
}

/** Checks the root ServerMessage; the position of its body table (-1: none). */
function checkServerMessage(b: Uint8Array): number {
  if (b.length < 8) malformed(`${b.length} bytes`);
  const root = checkTable(b, i32(b, 0) >>> 0, "root");
  return fieldTable(b, root, 6, "body"); // ServerMessage.body: field 1
}

function checkResponse(b: Uint8Array, response: number): void {
  if (response < 0) malformed("a Response without its table");
  fieldTable(b, response, 6, "error"); // Response.error: field 1
  fieldTable(b, response, 12, "result"); // Response.result: field 4 (result_type is field 3)
}

/** The SundialError of a failed Response, else null. */
export function replyError(response: P.Response): SundialError | null {
  const error = response.error();
  return error === null ? null : errorOf(error);
}

/** A protocol Error as a SundialError (NOT_PRIMARY: with the primary it names). */
function errorOf(error: P.Error): SundialError {
  return new SundialError(codeName(error.code()), text(error.message()), "server", error.primary() || null);
}

/** An ItemStatus: null when OK, else its SundialError. */
function statusError(status: P.ItemStatus | null): SundialError | null {
  if (status === null || status.code() === P.Code.OK) return null;
  return new SundialError(codeName(status.code()), text(status.message()), "server");
}

function replyProblem(name: string, what: string): SundialError {
  return new SundialError("INTERNAL", `${name}: ${what}`, "connection");
}

export function expect<T>(response: P.Response, type: P.Result, table: T, name: string): T {
  if (response.resultType() !== type) {
    throw replyProblem(name, `unexpected result type ${P.Result[response.resultType()] ?? response.resultType()}`);
  }
  const result = response.result(table) as T | null;
  if (result === null) throw replyProblem(name, "the reply has no result");
  return result;
}

const EMPTY = Buffer.alloc(0);

export function text(value: string | null): string {
  return value ?? "";
}

export function enumName<N extends string>(names: readonly N[], value: number): N {
  // A value from a newer server that this client does not know: its number as a string.
  return (value < names.length ? names[value] : String(value)) as N;
}

function stateName(value: number): State {
  return enumName(STATES, value);
}

export function metadataOf(table: { metadataLength(): number; metadata(i: number, obj?: P.MetadataPair): P.MetadataPair | null }): Metadata {
  const out: Metadata = {};
  const pair = new P.MetadataPair();
  for (let i = 0, n = table.metadataLength(); i < n; i++) {
    table.metadata(i, pair);
    out[text(pair.key())] = text(pair.value());
  }
  return out;
}

export function decodeMessage(m: P.Message): Message {
  const payload = m.payloadArray();
  const message: Message = {
    queue: text(m.queue()),
    id: text(m.id()),
    priority: Number(m.priority()),
    // A view of the reply's bytes, not a copy: the frame is never reused.
    payload: payload === null ? EMPTY : Buffer.from(payload.buffer, payload.byteOffset, payload.length),
    metadata: metadataOf(m),
    state: stateName(m.state()),
    attempts: m.attempts(),
    max_attempts: m.maxAttempts(),
    visible_at: Number(m.visibleAt()),
    lease_token: Number(m.leaseToken()),
    lease_expires_at: Number(m.leaseExpiresAt()),
    version: Number(m.version()),
    enqueued_at: Number(m.enqueuedAt()),
    updated_at: Number(m.updatedAt()),
    last_error: text(m.lastError()),
    result: bytesOf(m.resultArray()),
    expires_at: Number(m.expiresAt()),
  };
  // Present only when asked for (include_dependency_results) and the message has dependencies:
  // one Outcome per dependency, its id "queue/id".
  if (m.dependencyResultsLength() > 0) {
    const dependencies: Outcome[] = [];
    for (let i = 0, n = m.dependencyResultsLength(); i < n; i++) dependencies.push(decodeOutcome(m.dependencyResults(i)!));
    message.dependency_results = dependencies;
  }
  return message;
}

/** A view of a reply's bytes, not a copy: the frame is never reused. */
export function bytesOf(array: Uint8Array | null): Buffer {
  return array === null ? EMPTY : Buffer.from(array.buffer, array.byteOffset, array.length);
}

const TERMINAL: ReadonlySet<State> = new Set(["completed", "canceled", "errored"]);

function decodeOutcome(w: P.WaitItem): Outcome {
  const error = w.error();
  const state = stateName(w.state());
  return {
    id: text(w.id()),
    state,
    result: bytesOf(w.resultArray()),
    last_error: text(w.lastError()),
    done: error === null && TERMINAL.has(state),
    error: error === null ? null : errorOf(error),
  };
}

function decodeCounts(c: P.StateCounts | null): Counts {
  if (c === null) {
    return { invisible: 0, pending: 0, running: 0, completed: 0, canceled: 0, errored: 0, waiting: 0, blocked: 0 };
  }
  return {
    invisible: Number(c.invisible()),
    pending: Number(c.pending()),
    running: Number(c.running()),
    completed: Number(c.completed()),
    canceled: Number(c.canceled()),
    errored: Number(c.errored()),
    waiting: Number(c.waiting()),
    blocked: Number(c.blocked()),
  };
}


/** A setting the server left out of a queue it describes: it sends every one. */
function setting<T>(name: string, value: T | null): T {
  if (value === null) throw replyProblem("queue", `the reply has no ${name}`);
  return value;
}

export function decodeQueue(q: P.QueueInfo): Queue {
  const s = q.settings();
  if (s === null) throw replyProblem("queue", "the reply has no settings");
  return {
    name: text(q.name()),
    type: enumName(QUEUE_TYPES, setting("type", s.type())),
    exclusivity_key: s.exclusivityKey() || null,
    lease_ms: Number(setting("lease_ms", s.leaseMs())),
    invisibility_ms: Number(setting("invisibility_ms", s.invisibilityMs())),
    max_attempts: setting("max_attempts", s.maxAttempts()),
    retry_backoff_ms: Number(setting("retry_backoff_ms", s.retryBackoffMs())),
    retry_backoff_max_ms: Number(setting("retry_backoff_max_ms", s.retryBackoffMaxMs())),
    dead_letter_queue: s.deadLetterQueue() || null,
    retention_ms: Number(setting("retention_ms", s.retentionMs())),
    max_depth: Number(setting("max_depth", s.maxDepth())),
    enqueue_paused: setting("enqueue_paused", s.enqueuePaused()),
    dequeue_paused: setting("dequeue_paused", s.dequeuePaused()),
    history_max: setting("history_max", s.historyMax()),
    flow_key: s.flowKey() || null,
    key_concurrency: setting("key_concurrency", s.keyConcurrency()),
    ttl_ms: Number(setting("ttl_ms", s.ttlMs())),
    dedupe: enumName(DEDUPES, setting("dedupe", s.dedupe())),
    rate_per_s: setting("rate_per_s", s.ratePerS()),
    burst: setting("burst", s.burst()),
    key_rate_per_s: setting("key_rate_per_s", s.keyRatePerS()),
    key_burst: setting("key_burst", s.keyBurst()),
    fairness: enumName(FAIRNESSES, setting("fairness", s.fairness())),
    overdue_first_ms: Number(setting("overdue_first_ms", s.overdueFirstMs())),
    counts: decodeCounts(q.counts()),
    oldest_pending_age_ms: Number(q.oldestPendingAgeMs()),
    memory_bytes: Number(q.memoryBytes()),
  };
}

function decodeQueueResult(name: string) {
  return (response: P.Response): Queue => {
    const r = expect(response, P.Result.QueueResult, new P.QueueResult(), name);
    const q = r.queue();
    if (q === null) throw replyProblem(name, "the reply has no queue");
    return decodeQueue(q);
  };
}

function itemErrors(r: P.ItemResults): (SundialError | null)[] {
  const out: (SundialError | null)[] = [];
  const item = new P.ItemStatus();
  for (let i = 0, n = r.itemsLength(); i < n; i++) {
    r.items(i, item);
    const code = item.code();
    out.push(code === P.Code.OK ? null : new SundialError(codeName(code), text(item.message()), "server"));
  }
  return out;
}

function decodeItemResults(response: P.Response, name: string): (SundialError | null)[] {
  return itemErrors(expect(response, P.Result.ItemResults, new P.ItemResults(), name));
}

function decodeCounted(response: P.Response, name: string): number {
  return Number(expect(response, P.Result.Counted, new P.Counted(), name).count());
}

/** The one item's error thrown; nothing when it succeeded. */
function raiseSingle(errors: (SundialError | null)[], name: string): void {
  if (errors.length === 0) throw replyProblem(name, "the reply has no item result");
  if (errors[0] !== null) throw errors[0];
}

const ZERO_STATS: Stats = {
  uptime_ms: 0,
  queues: 0,
  messages: decodeCounts(null),
  memory_bytes: 0,
  memory_budget_bytes: 0,
  connections: 0,
  wal_next_lsn: 0,
  wal_durable_lsn: 0,
  wal_fsyncs: 0,
  wal_fsync_mean_us: 0,
  wal_bytes: 0,
  wal_failed: false,
};

export function decodeStats(r: P.StatsResult): Stats {
  return {
    uptime_ms: Number(r.uptimeMs()),
    queues: Number(r.queues()),
    messages: decodeCounts(r.messages()),
    memory_bytes: Number(r.memoryBytes()),
    memory_budget_bytes: Number(r.memoryBudgetBytes()),
    connections: Number(r.connections()),
    wal_next_lsn: Number(r.walNextLsn()),
    wal_durable_lsn: Number(r.walDurableLsn()),
    wal_fsyncs: Number(r.walFsyncs()),
    wal_fsync_mean_us: r.walFsyncMeanUs(),
    wal_bytes: Number(r.walBytes()),
    wal_failed: r.walFailed(),
  };
}

// ---- Checking arguments ------------------------------------------------------------------------

type IntKind = "int64" | "uint32" | "uint64";
const BOUNDS: Record<IntKind, [bigint, bigint]> = {
  int64: [-(1n << 63n), (1n << 63n) - 1n],
  uint32: [0n, (1n << 32n) - 1n],
  uint64: [0n, (1n << 64n) - 1n],
};

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value;
}

/** An integer (a safe-integer number, or a bigint for the whole 64-bit range) as a bigint. */
export function int64(name: string, value: unknown, kind: IntKind = "int64"): bigint {
  let big: bigint;
  if (typeof value === "bigint") {
    big = value;
  } else if (typeof value === "number" && Number.isInteger(value)) {
    if (!Number.isSafeInteger(value)) {
      throw invalidArgument(`${name}: ${value} is beyond ±2^53; pass a bigint for exact 64-bit values`);
    }
    big = BigInt(value);
  } else {
    throw invalidArgument(`${name}: must be an integer, not ${typeOf(value)}${typeof value === "number" ? ` ${value}` : ""}`);
  }
  const [low, high] = BOUNDS[kind];
  if (big < low || big > high) throw invalidArgument(`${name}: ${big} is out of range [${low}, ${high}]`);
  return big;
}

/** A 32-bit unsigned integer as a number. */
export function uint32(name: string, value: unknown): number {
  return Number(int64(name, value, "uint32"));
}

/** Tokens per second: a finite number (the server checks the range and the 3 decimals). */
function rate(name: string, value: unknown): number {
  if (typeof value === "number" && Number.isFinite(value)) return value;
  throw invalidArgument(`${name}: must be a finite number, not ${typeOf(value)}`);
}

export function str(name: string, value: unknown): string {
  if (typeof value === "string") return value;
  throw invalidArgument(`${name}: must be a string, not ${typeOf(value)}`);
}

export function bool(name: string, value: unknown): boolean {
  if (typeof value === "boolean") return value;
  throw invalidArgument(`${name}: must be a boolean, not ${typeOf(value)}`);
}

export type Payload = Buffer | Uint8Array | string;

export function payloadBytes(value: unknown): Uint8Array {
  if (value === undefined || value === null) return EMPTY;
  if (value instanceof Uint8Array) return value;
  if (typeof value === "string") return Buffer.from(value, "utf8");
  throw invalidArgument(`payload: must be a Buffer, a Uint8Array or a string, not ${typeOf(value)}`);
}

/** Metadata or a filter: an object (or Map) of string to string, as [key, value] pairs. */
export function pairs(name: string, value: unknown): [string, string][] {
  if (value === undefined || value === null) return [];
  const entries: [unknown, unknown][] =
    value instanceof Map ? [...value.entries()] : typeof value === "object" && !Array.isArray(value) ? Object.entries(value) : [];
  if (entries.length === 0 && (typeof value !== "object" || Array.isArray(value))) {
    throw invalidArgument(`${name}: must be an object of string to string, not ${typeOf(value)}`);
  }
  return entries.map(([k, v]) => [str(`${name} key`, k), str(`${name}[${JSON.stringify(k)}]`, v)]);
}

/** Refuses keys an options object does not know: a typo (`leaseMs`) must not be ignored. */
export function checkKeys(name: string, value: unknown, known: readonly string[]): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw invalidArgument(`${name}: must be an object, not ${typeOf(value)}`);
  }
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      throw invalidArgument(`${name}: unknown option "${key}"; the options are ${known.join(", ")}`);
    }
  }
  return value as Record<string, unknown>;
}

function stateValue(name: string, value: unknown): number {
  const index = STATES.indexOf(value as State);
  if (index < 0) throw invalidArgument(`${name}: ${JSON.stringify(value)} is not one of ${STATES.join(", ")}`);
  return index;
}

export function optional<T>(value: unknown, check: (v: unknown) => T): T | undefined {
  return value === undefined || value === null ? undefined : check(value);
}

// ---- Building ----------------------------------------------------------------------------------

/**
 * Writes an optional scalar (a field declared `= null` in the schema) even when it equals zero.
 * flatc 2.0.8's TypeScript generator writes such fields with a default of 0, so the generated
 * add would drop `dequeue_paused: false`, `priority: 0` or `retry_delay_ms: 0`, which the server
 * must see as given (docs/protocol.md: an absent field is "unchanged" or "the queue's default").
 */
export function addPresent(b: flatbuffers.Builder, add: () => void): void {
  b.forceDefaults(true);
  add();
  b.forceDefaults(false);
}

interface BuilderInternals {
  bb: flatbuffers.ByteBuffer;
  space: number;
}

/**
 * A [ubyte] vector written with one copy. The generated create…Vector adds byte by byte (a
 * megabyte payload costs milliseconds); this is the runtime's own createString sequence with
 * the copy done by Uint8Array.set. test/codec.test.js checks both write the same bytes.
 */
export function byteVector(b: flatbuffers.Builder, data: Uint8Array): flatbuffers.Offset {
  b.startVector(1, data.length, 1);
  const inner = b as unknown as BuilderInternals;
  inner.space -= data.length;
  inner.bb.setPosition(inner.space);
  inner.bb.bytes().set(data, inner.space);
  return b.endVector();
}

/**
 * A string written as the runtime's createString writes it, without its TextEncoder for ASCII
 * (the common case: names, ids, metadata), where TextEncoder's call into C++ costs more than the
 * rest of a small request; other strings go through Buffer's UTF-8 encoder. test/codec.test.js
 * checks both write the runtime's bytes.
 */
export function createString(b: flatbuffers.Builder, s: string): flatbuffers.Offset {
  const n = s.length;
  for (let i = 0; i < n; i++) {
    if (s.charCodeAt(i) > 0x7f) return b.createString(Buffer.from(s, "utf8"));
  }
  b.addInt8(0);
  b.startVector(1, n, 1);
  const inner = b as unknown as BuilderInternals;
  inner.space -= n;
  inner.bb.setPosition(inner.space);
  const bytes = inner.bb.bytes();
  for (let i = 0, o = inner.space; i < n; i++, o++) bytes[o] = s.charCodeAt(i);
  return b.endVector();
}

export function pairVector(b: flatbuffers.Builder, list: [string, string][]): flatbuffers.Offset {
  const offsets = list.map(([k, v]) => {
    const ko = createString(b, k);
    const vo = createString(b, v);
    P.MetadataPair.startMetadataPair(b);
    P.MetadataPair.addKey(b, ko);
    P.MetadataPair.addValue(b, vo);
    return P.MetadataPair.endMetadataPair(b);
  });
  return offsetVector(b, offsets);
}

export function offsetVector(b: flatbuffers.Builder, offsets: flatbuffers.Offset[]): flatbuffers.Offset {
  b.startVector(4, offsets.length, 4);
  for (let i = offsets.length - 1; i >= 0; i--) b.addOffset(offsets[i]!);
  return b.endVector();
}

function stringVector(b: flatbuffers.Builder, strings: string[]): flatbuffers.Offset {
  return offsetVector(b, strings.map((s) => createString(b, s)));
}

export function call<T>(
  name: string,
  opType: P.Operation,
  mutates: boolean,
  build: (b: flatbuffers.Builder) => flatbuffers.Offset,
  decode: (response: P.Response) => T,
  options: { waitMs?: number; resend?: boolean; anyNode?: boolean } = {},
): Call<T> {
  return {
    name,
    opType,
    mutates,
    waitMs: options.waitMs ?? 0,
    resend: options.resend ?? true,
    anyNode: options.anyNode ?? false,
    build,
    decode,
  };
}

// ---- Queues ------------------------------------------------------------------------------------

export const SETTING_NAMES = [
  "type",
  "exclusivity_key",
  "lease_ms",
  "invisibility_ms",
  "max_attempts",
  "retry_backoff_ms",
  "retry_backoff_max_ms",
  "dead_letter_queue",
  "retention_ms",
  "max_depth",
  "enqueue_paused",
  "dequeue_paused",
  "history_max",
  "flow_key",
  "key_concurrency",
  "ttl_ms",
  "dedupe",
  "rate_per_s",
  "burst",
  "key_rate_per_s",
  "key_burst",
  "fairness",
  "overdue_first_ms",
] as const;
/** Fixed at creation: not in QueueSettingsUpdate. */
const FIXED_SETTINGS: readonly string[] = ["type", "exclusivity_key", "flow_key"];
const UPDATABLE = SETTING_NAMES.filter((n) => !FIXED_SETTINGS.includes(n));
const INT64_SETTINGS = [
  "lease_ms",
  "invisibility_ms",
  "retry_backoff_ms",
  "retry_backoff_max_ms",
  "retention_ms",
  "ttl_ms",
  "overdue_first_ms",
] as const;

interface SettingsTable {
  addLeaseMs(b: flatbuffers.Builder, v: bigint): void;
  addInvisibilityMs(b: flatbuffers.Builder, v: bigint): void;
  addMaxAttempts(b: flatbuffers.Builder, v: number): void;
  addRetryBackoffMs(b: flatbuffers.Builder, v: bigint): void;
  addRetryBackoffMaxMs(b: flatbuffers.Builder, v: bigint): void;
  addDeadLetterQueue(b: flatbuffers.Builder, v: flatbuffers.Offset): void;
  addRetentionMs(b: flatbuffers.Builder, v: bigint): void;
  addMaxDepth(b: flatbuffers.Builder, v: bigint): void;
  addEnqueuePaused(b: flatbuffers.Builder, v: boolean): void;
  addDequeuePaused(b: flatbuffers.Builder, v: boolean): void;
  addHistoryMax(b: flatbuffers.Builder, v: number): void;
  addKeyConcurrency(b: flatbuffers.Builder, v: number): void;
  addTtlMs(b: flatbuffers.Builder, v: bigint): void;
  addDedupe(b: flatbuffers.Builder, v: number): void;
  addRatePerS(b: flatbuffers.Builder, v: number): void;
  addBurst(b: flatbuffers.Builder, v: number): void;
  addKeyRatePerS(b: flatbuffers.Builder, v: number): void;
  addKeyBurst(b: flatbuffers.Builder, v: number): void;
  addFairness(b: flatbuffers.Builder, v: number): void;
  addOverdueFirstMs(b: flatbuffers.Builder, v: bigint): void;
}

const INT64_ADDERS: Record<(typeof INT64_SETTINGS)[number], keyof SettingsTable> = {
  lease_ms: "addLeaseMs",
  invisibility_ms: "addInvisibilityMs",
  retry_backoff_ms: "addRetryBackoffMs",
  retry_backoff_max_ms: "addRetryBackoffMaxMs",
  retention_ms: "addRetentionMs",
  ttl_ms: "addTtlMs",
  overdue_first_ms: "addOverdueFirstMs",
};

/** Checked settings, ready to write into QueueSettings (create) or QueueSettingsUpdate (update). */
function checkSettings(settings: unknown, update: boolean) {
  const what = update ? "updateQueue settings" : "createQueue settings";
  if (update && settings !== null && typeof settings === "object") {
    for (const fixed of FIXED_SETTINGS) {
      if (fixed in settings && (settings as Record<string, unknown>)[fixed] !== undefined) {
        throw invalidArgument(`${what}: ${fixed} is fixed at creation`);
      }
    }
  }
  const s = checkKeys(what, settings, update ? UPDATABLE : SETTING_NAMES);
  let type: number | undefined;
  if (s.type !== undefined) {
    type = QUEUE_TYPES.indexOf(s.type as never);
    if (type < 0) throw invalidArgument(`type: ${JSON.stringify(s.type)} is not "simple" or "exclusive"`);
  }
  let dedupe: number | undefined;
  if (s.dedupe !== undefined) {
    dedupe = DEDUPES.indexOf(s.dedupe as never);
    if (dedupe < 0) throw invalidArgument(`dedupe: ${JSON.stringify(s.dedupe)} is not "keep" or "while_active"`);
  }
  let fairness: number | undefined;
  if (s.fairness !== undefined) {
    fairness = FAIRNESSES.indexOf(s.fairness as never);
    if (fairness < 0) throw invalidArgument(`fairness: ${JSON.stringify(s.fairness)} is not "none" or "weighted"`);
  }
  const ints: [keyof SettingsTable, bigint][] = [];
  for (const name of INT64_SETTINGS) {
    const v = optional(s[name], (x) => int64(name, x));
    if (v !== undefined) ints.push([INT64_ADDERS[name], v]);
  }
  return {
    type,
    exclusivity_key: optional(s.exclusivity_key, (x) => str("exclusivity_key", x)),
    dead_letter_queue: optional(s.dead_letter_queue, (x) => str("dead_letter_queue", x)),
    ints,
    max_attempts: optional(s.max_attempts, (x) => uint32("max_attempts", x)),
    max_depth: optional(s.max_depth, (x) => int64("max_depth", x, "uint64")),
    enqueue_paused: optional(s.enqueue_paused, (x) => bool("enqueue_paused", x)),
    dequeue_paused: optional(s.dequeue_paused, (x) => bool("dequeue_paused", x)),
    history_max: optional(s.history_max, (x) => uint32("history_max", x)),
    flow_key: optional(s.flow_key, (x) => str("flow_key", x)),
    key_concurrency: optional(s.key_concurrency, (x) => uint32("key_concurrency", x)),
    dedupe,
    rate_per_s: optional(s.rate_per_s, (x) => rate("rate_per_s", x)),
    burst: optional(s.burst, (x) => uint32("burst", x)),
    key_rate_per_s: optional(s.key_rate_per_s, (x) => rate("key_rate_per_s", x)),
    key_burst: optional(s.key_burst, (x) => uint32("key_burst", x)),
    fairness,
  };
}

function buildSettings(b: flatbuffers.Builder, s: ReturnType<typeof checkSettings>, update: boolean): flatbuffers.Offset {
  const key = s.exclusivity_key !== undefined ? createString(b, s.exclusivity_key) : 0;
  const dlq = s.dead_letter_queue !== undefined ? createString(b, s.dead_letter_queue) : 0;
  const flowKey = s.flow_key !== undefined ? createString(b, s.flow_key) : 0;
  // Every given field is written, zero and false included: both tables' settings are optional
  // (absent: the server's default on create, unchanged on update).
  const table: SettingsTable = update ? P.QueueSettingsUpdate : P.QueueSettings;
  const add = (f: () => void) => addPresent(b, f);
  if (update) P.QueueSettingsUpdate.startQueueSettingsUpdate(b);
  else P.QueueSettings.startQueueSettings(b);
  if (!update && s.type !== undefined) add(() => P.QueueSettings.addType(b, s.type!));
  if (!update && key) P.QueueSettings.addExclusivityKey(b, key);
  for (const [adder, value] of s.ints) add(() => (table[adder] as (b: flatbuffers.Builder, v: bigint) => void)(b, value));
  if (s.max_attempts !== undefined) add(() => table.addMaxAttempts(b, s.max_attempts!));
  if (s.dead_letter_queue !== undefined) table.addDeadLetterQueue(b, dlq);
  if (s.max_depth !== undefined) add(() => table.addMaxDepth(b, s.max_depth!));
  if (s.enqueue_paused !== undefined) add(() => table.addEnqueuePaused(b, s.enqueue_paused!));
  if (s.dequeue_paused !== undefined) add(() => table.addDequeuePaused(b, s.dequeue_paused!));
  if (s.history_max !== undefined) add(() => table.addHistoryMax(b, s.history_max!));
  if (!update && s.flow_key !== undefined) P.QueueSettings.addFlowKey(b, flowKey);
  if (s.key_concurrency !== undefined) add(() => table.addKeyConcurrency(b, s.key_concurrency!));
  if (s.dedupe !== undefined) add(() => table.addDedupe(b, s.dedupe!));
  if (s.rate_per_s !== undefined) add(() => table.addRatePerS(b, s.rate_per_s!));
  if (s.burst !== undefined) add(() => table.addBurst(b, s.burst!));
  if (s.key_rate_per_s !== undefined) add(() => table.addKeyRatePerS(b, s.key_rate_per_s!));
  if (s.key_burst !== undefined) add(() => table.addKeyBurst(b, s.key_burst!));
  if (s.fairness !== undefined) add(() => table.addFairness(b, s.fairness!));
  return update ? P.QueueSettingsUpdate.endQueueSettingsUpdate(b) : P.QueueSettings.endQueueSettings(b);
}

export function createQueue(name: unknown, settings: QueueSettings | undefined): Call<Queue> {
  const n = str("name", name);
  const s = checkSettings(settings, false);
  return call("createQueue", P.Operation.CreateQueue, true, (b) => {
    const no = createString(b, n);
    const so = buildSettings(b, s, false);
    P.CreateQueue.startCreateQueue(b);
    P.CreateQueue.addName(b, no);
    P.CreateQueue.addSettings(b, so);
    return P.CreateQueue.endCreateQueue(b);
  }, decodeQueueResult("createQueue"));
}

export function updateQueue(name: unknown, settings: QueueSettingsUpdate | undefined): Call<Queue> {
  const n = str("name", name);
  const s = checkSettings(settings, true);
  return call("updateQueue", P.Operation.UpdateQueue, true, (b) => {
    const no = createString(b, n);
    const uo = buildSettings(b, s, true);
    P.UpdateQueue.startUpdateQueue(b);
    P.UpdateQueue.addName(b, no);
    P.UpdateQueue.addUpdate(b, uo);
    return P.UpdateQueue.endUpdateQueue(b);
  }, decodeQueueResult("updateQueue"));
}

export function getQueue(name: unknown): Call<Queue> {
  const n = str("name", name);
  return call("getQueue", P.Operation.GetQueue, false, (b) => {
    const no = createString(b, n);
    P.GetQueue.startGetQueue(b);
    P.GetQueue.addName(b, no);
    return P.GetQueue.endGetQueue(b);
  }, decodeQueueResult("getQueue"));
}

export function listQueues(): Call<Queue[]> {
  return call("listQueues", P.Operation.ListQueues, false, (b) => {
    P.ListQueues.startListQueues(b);
    return P.ListQueues.endListQueues(b);
  }, (response) => {
    const r = expect(response, P.Result.QueueList, new P.QueueList(), "listQueues");
    const out: Queue[] = [];
    for (let i = 0, n = r.queuesLength(); i < n; i++) out.push(decodeQueue(r.queues(i)!));
    return out;
  });
}

export function deleteQueue(name: unknown): Call<void> {
  const n = str("name", name);
  return call("deleteQueue", P.Operation.DeleteQueue, true, (b) => {
    const no = createString(b, n);
    P.DeleteQueue.startDeleteQueue(b);
    P.DeleteQueue.addName(b, no);
    return P.DeleteQueue.endDeleteQueue(b);
  }, (response) => {
    expect(response, P.Result.Done, new P.Done(), "deleteQueue");
  }, { resend: false });
}

export function purgeQueue(name: unknown, states: unknown): Call<number> {
  const n = str("name", name);
  const list = Array.isArray(states) ? states : [states];
  const values = list.map((s) => stateValue("states", s));
  return call("purgeQueue", P.Operation.PurgeQueue, true, (b) => {
    const no = createString(b, n);
    const vo = P.PurgeQueue.createStatesVector(b, values);
    P.PurgeQueue.startPurgeQueue(b);
    P.PurgeQueue.addName(b, no);
    P.PurgeQueue.addStates(b, vo);
    return P.PurgeQueue.endPurgeQueue(b);
  }, (response) => decodeCounted(response, "purgeQueue"));
}

// ---- Messages ----------------------------------------------------------------------------------

/** One message to enqueue (enqueue's options without the call options, plus the payload). */
export interface EnqueueItem {
  payload?: Payload;
  id?: string;
  priority?: number | bigint;
  metadata?: Metadata;
  /** Invisible for this long (relative), or until visible_at (absolute ms); not both. */
  delay_ms?: number | bigint;
  visible_at?: number | bigint;
  max_attempts?: number;
  /** Messages that must complete first: "queue/id", or ids of this queue (up to 100000). */
  depends_on?: string[];
  /** When a dependency is canceled or errored: "cancel" (default), "release" or "error". */
  on_dependency_failure?: DependencyFailurePolicy;
  /** The batch it joins (createBatch): NOT_FOUND when there is none, FAILED_PRECONDITION once sealed. */
  batch?: string;
  /** Canceled as expired if still pending or invisible this long after now (else the queue's ttl_ms). */
  ttl_ms?: number | bigint;
  /** With an id: a pending or invisible message of that id is replaced, visible no earlier than now + debounce_ms. */
  debounce_ms?: number | bigint;
}

export const ITEM_KEYS = [
  "payload",
  "id",
  "priority",
  "metadata",
  "delay_ms",
  "visible_at",
  "max_attempts",
  "depends_on",
  "on_dependency_failure",
  "batch",
  "ttl_ms",
  "debounce_ms",
] as const;

export interface CheckedItem {
  id: string | undefined;
  priority: bigint;
  payload: Uint8Array;
  metadata: [string, string][];
  delay_ms: bigint | undefined;
  visible_at: bigint | undefined;
  max_attempts: number | undefined;
  depends_on: string[];
  on_dependency_failure: number;  // the schema's DependencyFailurePolicy value
  batch: string;
  ttl_ms: bigint | undefined;
  debounce_ms: bigint | undefined;
}

function dependsOn(value: unknown): string[] {
  if (value == null) return [];
  if (!Array.isArray(value)) throw invalidArgument(`depends_on: must be an array of "queue/id" or id strings, not ${typeOf(value)}`);
  return value.map((x) => str("depends_on", x));
}

function dependencyFailurePolicy(value: unknown): number {
  if (value == null) return 0;
  const index = DEPENDENCY_FAILURE_POLICIES.indexOf(value as DependencyFailurePolicy);
  if (index < 0) {
    throw invalidArgument(`on_dependency_failure: ${JSON.stringify(value)} is not one of ${DEPENDENCY_FAILURE_POLICIES.join(", ")}`);
  }
  return index;
}

export function checkItem(item: Record<string, unknown>): CheckedItem {
  if (item.delay_ms != null && item.visible_at != null) {
    throw invalidArgument("delay_ms, visible_at: give one, not both");
  }
  return {
    id: optional(item.id, (x) => str("id", x)),
    priority: item.priority == null ? 0n : int64("priority", item.priority),
    payload: payloadBytes(item.payload),
    metadata: pairs("metadata", item.metadata),
    delay_ms: optional(item.delay_ms, (x) => int64("delay_ms", x)),
    visible_at: optional(item.visible_at, (x) => int64("visible_at", x)),
    max_attempts: optional(item.max_attempts, (x) => uint32("max_attempts", x)),
    depends_on: dependsOn(item.depends_on),
    on_dependency_failure: dependencyFailurePolicy(item.on_dependency_failure),
    batch: item.batch == null ? "" : str("batch", item.batch),
    ttl_ms: optional(item.ttl_ms, (x) => int64("ttl_ms", x)),
    debounce_ms: optional(item.debounce_ms, (x) => int64("debounce_ms", x)),
  };
}

function buildItems(b: flatbuffers.Builder, items: CheckedItem[]): flatbuffers.Offset {
  return offsetVector(b, items.map((item) => buildItem(b, item)));
}

/** One EnqueueItem table (an Enqueue's item, or a flow node's). */
export function buildItem(b: flatbuffers.Builder, item: CheckedItem): flatbuffers.Offset {
  {
    const id = item.id ? createString(b, item.id) : 0;
    const payload = item.payload.length ? byteVector(b, item.payload) : 0;
    const metadata = item.metadata.length ? pairVector(b, item.metadata) : 0;
    const dependsOnVector = item.depends_on.length
      ? offsetVector(b, item.depends_on.map((d) => createString(b, d)))
      : 0;
    const batch = item.batch ? createString(b, item.batch) : 0;
    P.EnqueueItem.startEnqueueItem(b);
    if (id) P.EnqueueItem.addId(b, id);
    if (item.priority !== 0n) P.EnqueueItem.addPriority(b, item.priority);
    if (payload) P.EnqueueItem.addPayload(b, payload);
    if (metadata) P.EnqueueItem.addMetadata(b, metadata);
    if (item.delay_ms !== undefined) addPresent(b, () => P.EnqueueItem.addDelayMs(b, item.delay_ms!));
    if (item.visible_at !== undefined) addPresent(b, () => P.EnqueueItem.addVisibleAt(b, item.visible_at!));
    if (item.max_attempts !== undefined) addPresent(b, () => P.EnqueueItem.addMaxAttempts(b, item.max_attempts!));
    if (dependsOnVector) P.EnqueueItem.addDependsOn(b, dependsOnVector);
    if (item.on_dependency_failure) P.EnqueueItem.addOnDependencyFailure(b, item.on_dependency_failure);
    if (batch) P.EnqueueItem.addBatch(b, batch);
    if (item.ttl_ms !== undefined) addPresent(b, () => P.EnqueueItem.addTtlMs(b, item.ttl_ms!));
    if (item.debounce_ms !== undefined) addPresent(b, () => P.EnqueueItem.addDebounceMs(b, item.debounce_ms!));
    return P.EnqueueItem.endEnqueueItem(b);
  }
}

function decodeEnqueueResults(response: P.Response): EnqueueResult[] {
  const r = expect(response, P.Result.EnqueueResults, new P.EnqueueResults(), "enqueue");
  const out: EnqueueResult[] = [];
  for (let i = 0, n = r.itemsLength(); i < n; i++) {
    const item = r.items(i)!;
    const error = item.error();
    out.push({
      id: text(item.id()),
      version: Number(item.version()),
      duplicate: item.duplicate(),
      error: error === null ? null : errorOf(error),
      outcome: item.outcome() === null ? null : decodeOutcome(item.outcome()!),
    });
  }
  return out;
}

/** One Enqueue request of up to MAX_BATCH checked items (wait_ms: answered with their outcomes). */
function enqueueChunk(queue: string, items: CheckedItem[], waitMs = 0): Call<EnqueueResult[]> {
  return call("enqueue", P.Operation.Enqueue, true, (b) => {
    const vector = buildItems(b, items);
    const q = createString(b, queue);
    P.Enqueue.startEnqueue(b);
    P.Enqueue.addQueue(b, q);
    P.Enqueue.addItems(b, vector);
    if (waitMs) P.Enqueue.addWaitMs(b, waitMs);
    return P.Enqueue.endEnqueue(b);
    // Sent again after an unknown outcome only when the server can tell a repeat: ids.
  }, decodeEnqueueResults, { waitMs, resend: items.every((item) => !!item.id) });
}

/** The most a request may be held for its wait_ms (long polls, wait, enqueue's wait_ms). */
export const MAX_WAIT_MS = 60_000;

function waitMsOf(value: unknown): number {
  if (value === undefined || value === null) return 0;
  const ms = uint32("wait_ms", value);
  if (ms > MAX_WAIT_MS) throw invalidArgument(`wait_ms: ${ms} is above ${MAX_WAIT_MS}`);
  return ms;
}

export function enqueue(queue: unknown, item: Record<string, unknown>, waitMs?: unknown): Call<EnqueueResult> {
  const chunk = enqueueChunk(str("queue", queue), [checkItem(item)], waitMsOf(waitMs));
  return {
    ...chunk,
    decode(response) {
      const results = decodeEnqueueResults(response);
      if (results.length === 0) throw replyProblem("enqueue", "the reply has no item");
      if (results[0]!.error !== null) throw results[0]!.error;
      return results[0]!;
    },
  };
}

export function enqueueBatch(queue: unknown, items: unknown): Batch<EnqueueResult[], EnqueueResult[]> {
  const q = str("queue", queue);
  if (!Array.isArray(items)) throw invalidArgument(`items: must be an array, not ${typeOf(items)}`);
  const checked = items.map((item, k) => checkItem(checkKeys(`items[${k}]`, item, ITEM_KEYS)));
  const calls: Call<EnqueueResult[]>[] = [];
  for (let i = 0; i < checked.length; i += MAX_BATCH) calls.push(enqueueChunk(q, checked.slice(i, i + MAX_BATCH)));
  return { calls, combine: (chunks) => chunks.flat() };
}

export function dequeue(
  queue: unknown,
  max: unknown,
  leaseMs: unknown,
  filter: unknown,
  waitMs: unknown,
  includeDependencyResults?: unknown,
  workerId?: unknown,
): Call<Message[]> {
  const q = str("queue", queue);
  const m = max === undefined ? 1 : uint32("max", max);
  const lease = optional(leaseMs, (x) => int64("lease_ms", x));
  const f = pairs("filter", filter);
  const wait = waitMs === undefined ? 0 : uint32("wait_ms", waitMs);
  const worker = workerIdOf(workerId);
  return call("dequeue", P.Operation.Dequeue, true, (b) => {
    const qo = createString(b, q);
    const fo = f.length ? pairVector(b, f) : 0;
    const wo = worker ? createString(b, worker) : 0;
    P.Dequeue.startDequeue(b);
    P.Dequeue.addQueue(b, qo);
    P.Dequeue.addMax(b, m);
    if (lease !== undefined) addPresent(b, () => P.Dequeue.addLeaseMs(b, lease));
    if (fo) P.Dequeue.addFilter(b, fo);
    if (wait) P.Dequeue.addWaitMs(b, wait);
    if (includeDependencyResults) P.Dequeue.addIncludeDependencyResults(b, true);
    if (wo) P.Dequeue.addWorkerId(b, wo);
    return P.Dequeue.endDequeue(b);
  }, (response) => {
    const r = expect(response, P.Result.DequeueResult, new P.DequeueResult(), "dequeue");
    const out: Message[] = [];
    const m = new P.Message();
    for (let i = 0, n = r.messagesLength(); i < n; i++) out.push(decodeMessage(r.messages(i, m)!));
    return out;
  }, { waitMs: wait });
}

/** One item of a complete. `result` will travel once the protocol has a field for it. */
export interface CompleteItem {
  id: string;
  lease_token: number | bigint;
  result?: Payload;
}

export function completeBatch(queue: unknown, items: unknown): Batch<(SundialError | null)[], (SundialError | null)[]> {
  const q = str("queue", queue);
  if (!Array.isArray(items)) throw invalidArgument(`items: must be an array of {id, lease_token}, not ${typeOf(items)}`);
  const checked = items.map((item, k) => {
    const i = checkKeys(`items[${k}]`, item, ["id", "lease_token", "result"]);
    return {
      id: str("id", i.id),
      token: int64("lease_token", i.lease_token, "uint64"),
      result: optional(i.result, payloadBytes),
    };
  });
  const calls: Call<(SundialError | null)[]>[] = [];
  for (let i = 0; i < checked.length; i += MAX_BATCH) {
    const chunk = checked.slice(i, i + MAX_BATCH);
    calls.push(call("complete", P.Operation.Complete, true, (b) => {
      return buildComplete(b, q, chunk, null);
    }, (response) => decodeItemResults(response, "complete")));
  }
  return { calls, combine: (chunks) => chunks.flat() };
}

interface CheckedComplete {
  id: string;
  token: bigint;
  result: Uint8Array | undefined;
}

function buildComplete(b: flatbuffers.Builder, queue: string, items: CheckedComplete[], next: CheckedNext | null): flatbuffers.Offset {
  const offsets = items.map((item) => {
    const id = createString(b, item.id);
    const result = item.result !== undefined && item.result.length ? byteVector(b, item.result) : 0;
    P.CompleteItem.startCompleteItem(b);
    P.CompleteItem.addId(b, id);
    P.CompleteItem.addLeaseToken(b, item.token);
    if (result) P.CompleteItem.addResult(b, result);
    return P.CompleteItem.endCompleteItem(b);
  });
  const vector = offsetVector(b, offsets);
  const no = next === null ? 0 : buildDequeue(b, next);
  const qo = createString(b, queue);
  P.Complete.startComplete(b);
  P.Complete.addQueue(b, qo);
  P.Complete.addItems(b, vector);
  if (no) P.Complete.addNext(b, no);
  return P.Complete.endComplete(b);
}

export function complete(queue: unknown, id: unknown, leaseToken: unknown, result: unknown): Call<void> {
  const single = completeBatch(queue, [{ id: str("id", id), lease_token: leaseToken, result: result ?? undefined }]).calls[0]!;
  return { ...single, decode: (response) => raiseSingle(decodeItemResults(response, "complete"), "complete") };
}

/** The dequeue a complete or fail carries as `next` (docs/semantics.md, "Complete-and-next"). */
export interface NextOptions {
  /** The queue to lease from; absent: the same queue. */
  queue?: string;
  /** 1–1000 (default 1). */
  max?: number;
  lease_ms?: number;
  filter?: Metadata;
  /** A long poll of up to 60000 ms when nothing is dequeueable (the completion is applied at once). */
  wait_ms?: number;
  /** Each leased message carries its dependencies' outcomes (`dependency_results`). */
  include_dependency_results?: boolean;
  /** Who dequeues (up to 128 bytes): kept in each leased message's history. */
  worker_id?: string;
}

export const NEXT_KEYS = ["queue", "max", "lease_ms", "filter", "wait_ms", "include_dependency_results", "worker_id"] as const;

/** A dequeue's worker_id: a string of up to 128 bytes ("" or absent: none). */
function workerIdOf(value: unknown): string {
  if (value === undefined) return "";
  const w = str("worker_id", value);
  if (Buffer.byteLength(w) > 128) throw invalidArgument("worker_id: at most 128 bytes");
  return w;
}

interface CheckedNext {
  queue: string;
  max: number;
  lease: bigint | undefined;
  filter: [string, string][];
  wait: number;
  dependencies: boolean;
  worker: string;
}

function checkNext(next: unknown): CheckedNext {
  const n = checkKeys("next", next, NEXT_KEYS);
  return {
    queue: n.queue === undefined ? "" : str("next.queue", n.queue),
    max: n.max === undefined ? 1 : uint32("max", n.max),
    lease: optional(n.lease_ms, (x) => int64("lease_ms", x)),
    filter: pairs("filter", n.filter),
    wait: waitMsOf(n.wait_ms),
    dependencies: Boolean(n.include_dependency_results),
    worker: workerIdOf(n.worker_id),
  };
}

function buildDequeue(b: flatbuffers.Builder, d: CheckedNext): flatbuffers.Offset {
  const qo = d.queue ? createString(b, d.queue) : 0;
  const fo = d.filter.length ? pairVector(b, d.filter) : 0;
  const wo = d.worker ? createString(b, d.worker) : 0;
  P.Dequeue.startDequeue(b);
  if (qo) P.Dequeue.addQueue(b, qo);
  P.Dequeue.addMax(b, d.max);
  if (d.lease !== undefined) addPresent(b, () => P.Dequeue.addLeaseMs(b, d.lease!));
  if (fo) P.Dequeue.addFilter(b, fo);
  if (d.wait) P.Dequeue.addWaitMs(b, d.wait);
  if (d.dependencies) P.Dequeue.addIncludeDependencyResults(b, true);
  if (wo) P.Dequeue.addWorkerId(b, wo);
  return P.Dequeue.endDequeue(b);
}

function decodeMessages(length: number, at: (i: number, m: P.Message) => P.Message | null): Message[] {
  const out: Message[] = [];
  const m = new P.Message();
  for (let i = 0; i < length; i++) out.push(decodeMessage(at(i, m)!));
  return out;
}

/** Completes `items` ({id, lease_token, result?}) and leases as `next` says, in one request. */
export function completeAndNext(queue: unknown, items: unknown, next: unknown): Call<NextResult> {
  const q = str("queue", queue);
  if (!Array.isArray(items) || items.length > MAX_BATCH) {
    throw invalidArgument(`items: must be an array of up to ${MAX_BATCH} {id, lease_token}`);
  }
  const checked = items.map((item, k) => {
    const i = checkKeys(`items[${k}]`, item, ["id", "lease_token", "result"]);
    return { id: str("id", i.id), token: int64("lease_token", i.lease_token, "uint64"), result: optional(i.result, payloadBytes) };
  });
  const n = checkNext(next);
  return call("complete", P.Operation.Complete, true, (b) => buildComplete(b, q, checked, n), (response) => {
    const r = expect(response, P.Result.ItemResults, new P.ItemResults(), "complete");
    return {
      errors: itemErrors(r),
      next: decodeMessages(r.nextLength(), (i, m) => r.next(i, m)),
      next_error: statusError(r.nextError()),
    };
  }, { waitMs: n.wait });
}

export function fail(queue: unknown, id: unknown, leaseToken: unknown, error: unknown, retryDelayMs: unknown): Call<FailResult> {
  const c = failCall(queue, id, leaseToken, error, retryDelayMs, null);
  return { ...c, decode: (response) => c.decode(response).fail! };
}

/** Fails one message and leases as `next` says, in one request (a refused fail leases nothing). */
export function failAndNext(queue: unknown, id: unknown, leaseToken: unknown, error: unknown, retryDelayMs: unknown, next: unknown): Call<NextResult> {
  return failCall(queue, id, leaseToken, error, retryDelayMs, checkNext(next));
}

function failCall(queue: unknown, id: unknown, leaseToken: unknown, error: unknown, retryDelayMs: unknown, next: CheckedNext | null): Call<NextResult> {
  const q = str("queue", queue);
  const i = str("id", id);
  const token = int64("lease_token", leaseToken, "uint64");
  const e = error === undefined || error === null ? "" : str("error", error);
  const delay = optional(retryDelayMs, (x) => int64("retry_delay_ms", x));
  return call("fail", P.Operation.Fail, true, (b) => {
    const no = next === null ? 0 : buildDequeue(b, next);
    const qo = createString(b, q);
    const io = createString(b, i);
    const eo = e ? createString(b, e) : 0;
    P.Fail.startFail(b);
    P.Fail.addQueue(b, qo);
    P.Fail.addId(b, io);
    P.Fail.addLeaseToken(b, token);
    if (eo) P.Fail.addError(b, eo);
    if (delay !== undefined) addPresent(b, () => P.Fail.addRetryDelayMs(b, delay));
    if (no) P.Fail.addNext(b, no);
    return P.Fail.endFail(b);
  }, (response) => {
    const r = expect(response, P.Result.FailResult, new P.FailResult(), "fail");
    return {
      errors: [],
      next: decodeMessages(r.nextLength(), (k, m) => r.next(k, m)),
      next_error: statusError(r.nextError()),
      fail: { state: stateName(r.state()), visible_at: Number(r.visibleAt()), dead_letter_queue: r.deadLetterQueue() || null },
    };
  }, { waitMs: next?.wait ?? 0 });
}

export function extend(queue: unknown, id: unknown, leaseToken: unknown, leaseMs: unknown): Call<number> {
  const q = str("queue", queue);
  const i = str("id", id);
  const token = int64("lease_token", leaseToken, "uint64");
  const lease = int64("lease_ms", leaseMs);
  return call("extend", P.Operation.Extend, true, (b) => {
    const qo = createString(b, q);
    const io = createString(b, i);
    P.Extend.startExtend(b);
    P.Extend.addQueue(b, qo);
    P.Extend.addId(b, io);
    P.Extend.addLeaseToken(b, token);
    P.Extend.addLeaseMs(b, lease);
    return P.Extend.endExtend(b);
  }, (response) => Number(expect(response, P.Result.ExtendResult, new P.ExtendResult(), "extend").leaseExpiresAt()));
}

/** Which messages a bulk operation takes: one id, a list of ids, or a selector object. */
export type Selector<Extra = object> = string | string[] | ({ filter?: Metadata } & Extra);

/** cancel and redrive: one id (throws its error), a list (per-id errors), or a filter / all (the count). */
function idsOrFilter(
  name: "cancel" | "redrive",
  queue: unknown,
  selector: unknown,
): Call<unknown> {
  const q = str("queue", queue);
  const single = typeof selector === "string";
  let ids: string[] = [];
  let filter: [string, string][] = [];
  let all = false;
  if (typeof selector === "string") {
    ids = [selector];
  } else if (Array.isArray(selector)) {
    ids = selector.map((id) => str("ids", id));
  } else {
    const s = checkKeys(`${name} selector`, selector, name === "redrive" ? ["filter", "all"] : ["filter"]);
    filter = pairs("filter", s.filter);
    all = s.all === undefined ? false : bool("all", s.all);
    if (filter.length === 0 && !all) {
      throw invalidArgument(`${name}: give an id, a list of ids or {filter}${name === "redrive" ? " or {all: true}" : ""}`);
    }
  }
  const table = name === "cancel" ? P.Cancel : P.Redrive;
  return call(name, name === "cancel" ? P.Operation.Cancel : P.Operation.Redrive, true, (b) => {
    const qo = createString(b, q);
    const io = ids.length ? stringVector(b, ids) : 0;
    const fo = filter.length ? pairVector(b, filter) : 0;
    if (name === "cancel") P.Cancel.startCancel(b);
    else P.Redrive.startRedrive(b);
    table.addQueue(b, qo);
    if (io) table.addIds(b, io);
    if (fo) table.addFilter(b, fo);
    if (all) P.Redrive.addAll(b, true);
    return name === "cancel" ? P.Cancel.endCancel(b) : P.Redrive.endRedrive(b);
  }, (response) => {
    if (response.resultType() === P.Result.Counted) return decodeCounted(response, name);
    const errors = decodeItemResults(response, name);
    if (single) {
      raiseSingle(errors, name);
      return undefined;
    }
    return errors;
  });
}

export function cancel(queue: unknown, selector: unknown): Call<unknown> {
  return idsOrFilter("cancel", queue, selector);
}

export function redrive(queue: unknown, selector: unknown): Call<unknown> {
  // Not sent again after an unknown outcome: a repeat may move messages that errored again since.
  return { ...idsOrFilter("redrive", queue, selector), resend: false };
}

export function reprioritize(queue: unknown, selector: unknown, priority: unknown, visibleAt: unknown): Call<number> {
  const q = str("queue", queue);
  let id: string | undefined;
  let filter: [string, string][] = [];
  if (typeof selector === "string") {
    id = selector;
  } else {
    filter = pairs("filter", checkKeys("reprioritize selector", selector, ["filter"]).filter);
    if (filter.length === 0) throw invalidArgument("reprioritize: give an id or {filter}");
  }
  const p = optional(priority, (x) => int64("priority", x));
  const v = optional(visibleAt, (x) => int64("visible_at", x));
  return call("reprioritize", P.Operation.Reprioritize, true, (b) => {
    const qo = createString(b, q);
    const io = id !== undefined ? createString(b, id) : 0;
    const fo = filter.length ? pairVector(b, filter) : 0;
    P.Reprioritize.startReprioritize(b);
    P.Reprioritize.addQueue(b, qo);
    if (io) P.Reprioritize.addId(b, io);
    if (fo) P.Reprioritize.addFilter(b, fo);
    if (p !== undefined) addPresent(b, () => P.Reprioritize.addPriority(b, p));
    if (v !== undefined) addPresent(b, () => P.Reprioritize.addVisibleAt(b, v));
    return P.Reprioritize.endReprioritize(b);
  }, (response) => {
    if (response.resultType() === P.Result.Counted) return decodeCounted(response, "reprioritize");
    return Number(expect(response, P.Result.VersionResult, new P.VersionResult(), "reprioritize").version());
  });
}

export function get(queue: unknown, id: unknown, includeDependencyResults?: unknown): Call<Message> {
  const q = str("queue", queue);
  const i = str("id", id);
  return call("get", P.Operation.Get, false, (b) => {
    const qo = createString(b, q);
    const io = createString(b, i);
    P.Get.startGet(b);
    P.Get.addQueue(b, qo);
    P.Get.addId(b, io);
    if (includeDependencyResults) P.Get.addIncludeDependencyResults(b, true);
    return P.Get.endGet(b);
  }, (response) => {
    const m = expect(response, P.Result.GetResult, new P.GetResult(), "get").message();
    if (m === null) throw replyProblem("get", "the reply has no message");
    return decodeMessage(m);
  });
}

export function browse(queue: unknown, state: unknown, filter: unknown, cursor: unknown, limit: unknown): Call<BrowsePage> {
  const q = str("queue", queue);
  const s = stateValue("state", state ?? "pending");
  const f = pairs("filter", filter);
  const c = optional(cursor, (x) => str("cursor", x));
  const l = limit === undefined ? 100 : uint32("limit", limit);
  return call("browse", P.Operation.Browse, false, (b) => {
    const qo = createString(b, q);
    const fo = f.length ? pairVector(b, f) : 0;
    const co = c ? createString(b, c) : 0;
    P.Browse.startBrowse(b);
    P.Browse.addQueue(b, qo);
    P.Browse.addState(b, s);
    if (fo) P.Browse.addFilter(b, fo);
    if (co) P.Browse.addCursor(b, co);
    P.Browse.addLimit(b, l);
    return P.Browse.endBrowse(b);
  }, (response) => {
    const r = expect(response, P.Result.BrowseResult, new P.BrowseResult(), "browse");
    const messages: MessageSummary[] = [];
    const m = new P.MessageSummary();
    for (let i = 0, n = r.messagesLength(); i < n; i++) {
      r.messages(i, m);
      messages.push({
        id: text(m.id()),
        priority: Number(m.priority()),
        state: stateName(m.state()),
        attempts: m.attempts(),
        version: Number(m.version()),
        visible_at: Number(m.visibleAt()),
        lease_expires_at: Number(m.leaseExpiresAt()),
        enqueued_at: Number(m.enqueuedAt()),
        updated_at: Number(m.updatedAt()),
        expires_at: Number(m.expiresAt()),
      });
    }
    return { messages, next_cursor: text(r.nextCursor()) };
  });
}

export function count(queue: unknown, filter: unknown): Call<Counts> {
  const q = str("queue", queue);
  const f = pairs("filter", filter);
  return call("count", P.Operation.Count, false, (b) => {
    const qo = createString(b, q);
    const fo = f.length ? pairVector(b, f) : 0;
    P.Count.startCount(b);
    P.Count.addQueue(b, qo);
    if (fo) P.Count.addFilter(b, fo);
    return P.Count.endCount(b);
  }, (response) => decodeCounts(expect(response, P.Result.CountResult, new P.CountResult(), "count").counts()));
}

export function explain(queue: unknown, selector: unknown): Call<Explanation> {
  const q = str("queue", queue);
  let id: string | undefined;
  let filter: [string, string][] = [];
  if (typeof selector === "string") {
    id = selector;
  } else {
    filter = pairs("filter", checkKeys("explain selector", selector, ["filter"]).filter);
    if (filter.length === 0) throw invalidArgument("explain: give an id or {filter}");
  }
  return call("explain", P.Operation.Explain, false, (b) => {
    const qo = createString(b, q);
    const io = id !== undefined ? createString(b, id) : 0;
    const fo = filter.length ? pairVector(b, filter) : 0;
    P.Explain.startExplain(b);
    P.Explain.addQueue(b, qo);
    if (io) P.Explain.addId(b, io);
    if (fo) P.Explain.addFilter(b, fo);
    return P.Explain.endExplain(b);
  }, (response) => {
    const r = expect(response, P.Result.ExplainResult, new P.ExplainResult(), "explain");
    return {
      reason: enumName(EXPLAIN_REASONS, r.reason()),
      id: text(r.id()),
      state: stateName(r.state()),
      until: Number(r.until()),
      lease_token: Number(r.leaseToken()),
      exclusivity_value: text(r.exclusivityValue()),
      attempts: r.attempts(),
      dependencies: r.dependencies(),
      unfinished: r.unfinished(),
      waiting_on: Array.from({ length: r.waitingOnLength() }, (_, k) => r.waitingOn(k)),
      dependents: Array.from({ length: r.dependentsLength() }, (_, k) => r.dependents(k)),
      waiting_dependents: r.waitingDependents(),
      key_running: r.keyRunning(),
      key_concurrency: r.keyConcurrency(),
    };
  });
}

export function history(queue: unknown, id: unknown): Call<History> {
  const q = str("queue", queue);
  const i = str("id", id);
  return call("history", P.Operation.History, false, (b) => {
    const qo = createString(b, q);
    const io = createString(b, i);
    P.History.startHistory(b);
    P.History.addQueue(b, qo);
    P.History.addId(b, io);
    return P.History.endHistory(b);
  }, (response) => {
    const r = expect(response, P.Result.HistoryResult, new P.HistoryResult(), "history");
    const entries: HistoryEntry[] = [];
    const e = new P.HistoryEntry();
    for (let k = 0, n = r.entriesLength(); k < n; k++) {
      r.entries(k, e);
      entries.push({
        time: Number(e.time()),
        event: text(e.event()),
        from: stateName(e.from()),
        to: stateName(e.to()),
        attempt: e.attempt(),
        lease_token: Number(e.leaseToken()),
        actor: text(e.actor()),
        worker_id: text(e.workerId()),
        text: text(e.text()),
      });
    }
    return { entries, dropped: Number(r.dropped()) };
  });
}

function decodeKey(k: P.KeyInfo): KeyInfo {
  const overrides: KeyLimits = {};
  const o = k.overrides();
  if (o !== null) {
    if (o.concurrency() !== null) overrides.concurrency = o.concurrency()!;
    if (o.ratePerS() !== null) overrides.rate_per_s = o.ratePerS()!;
    if (o.burst() !== null) overrides.burst = o.burst()!;
    if (o.weight() !== null) overrides.weight = o.weight()!;
  }
  return {
    value: text(k.value()),
    overrides,
    concurrency: k.concurrency(),
    rate_per_s: k.ratePerS(),
    burst: k.burst(),
    weight: k.weight(),
    pending: Number(k.pending()),
    running: k.running(),
    held: k.held(),
    next_token: Number(k.nextToken()),
  };
}

function decodeKeyResult(name: string) {
  return (response: P.Response) => {
    const k = expect(response, P.Result.KeyResult, new P.KeyResult(), name).key();
    if (k === null) throw replyProblem(name, "the reply has no key");
    return decodeKey(k);
  };
}

export function setKeyLimits(queue: unknown, value: unknown, limits: unknown): Call<KeyInfo> {
  const q = str("queue", queue);
  const v = str("value", value);
  const l = checkKeys("setKeyLimits limits", limits ?? {}, ["concurrency", "rate_per_s", "burst", "weight"]);
  const concurrency = optional(l.concurrency, (x) => uint32("concurrency", x));
  const ratePerS = optional(l.rate_per_s, (x) => rate("rate_per_s", x));
  const burst = optional(l.burst, (x) => uint32("burst", x));
  const weight = optional(l.weight, (x) => uint32("weight", x));
  // A SET: sent again after an unknown outcome, it gives the same overrides.
  return call("setKeyLimits", P.Operation.SetKeyLimits, true, (b) => {
    const qo = createString(b, q);
    const vo = createString(b, v);
    P.KeyLimits.startKeyLimits(b);
    if (concurrency !== undefined) addPresent(b, () => P.KeyLimits.addConcurrency(b, concurrency));
    if (ratePerS !== undefined) addPresent(b, () => P.KeyLimits.addRatePerS(b, ratePerS));
    if (burst !== undefined) addPresent(b, () => P.KeyLimits.addBurst(b, burst));
    if (weight !== undefined) addPresent(b, () => P.KeyLimits.addWeight(b, weight));
    const lo = P.KeyLimits.endKeyLimits(b);
    P.SetKeyLimits.startSetKeyLimits(b);
    P.SetKeyLimits.addQueue(b, qo);
    P.SetKeyLimits.addValue(b, vo);
    P.SetKeyLimits.addLimits(b, lo);
    return P.SetKeyLimits.endSetKeyLimits(b);
  }, decodeKeyResult("setKeyLimits"));
}

export function getKeyLimits(queue: unknown, value: unknown): Call<KeyInfo> {
  const q = str("queue", queue);
  const v = str("value", value);
  return call("getKeyLimits", P.Operation.GetKeyLimits, false, (b) => {
    const qo = createString(b, q);
    const vo = createString(b, v);
    P.GetKeyLimits.startGetKeyLimits(b);
    P.GetKeyLimits.addQueue(b, qo);
    P.GetKeyLimits.addValue(b, vo);
    return P.GetKeyLimits.endGetKeyLimits(b);
  }, decodeKeyResult("getKeyLimits"));
}

export function listKeys(queue: unknown, order: unknown, limit: unknown): Call<KeyInfo[]> {
  const q = str("queue", queue);
  const o = KEY_ORDERS.indexOf((order ?? "pending") as never);
  if (o < 0) throw invalidArgument(`order: ${JSON.stringify(order)} is not "pending", "running" or "throttled"`);
  const n = uint32("limit", limit ?? 20);
  return call("listKeys", P.Operation.ListKeys, false, (b) => {
    const qo = createString(b, q);
    P.ListKeys.startListKeys(b);
    P.ListKeys.addQueue(b, qo);
    P.ListKeys.addOrder(b, o);
    P.ListKeys.addLimit(b, n);
    return P.ListKeys.endListKeys(b);
  }, (response) => {
    const r = expect(response, P.Result.KeyList, new P.KeyList(), "listKeys");
    const keys: KeyInfo[] = [];
    for (let k = 0, n = r.keysLength(); k < n; k++) keys.push(decodeKey(r.keys(k)!));
    return keys;
  });
}

export function note(queue: unknown, id: unknown, leaseToken: unknown, note: unknown): Call<void> {
  const q = str("queue", queue);
  const i = str("id", id);
  const token = int64("lease_token", leaseToken, "uint64");
  const t = str("text", note);
  const bytes = Buffer.byteLength(t);
  if (bytes < 1 || bytes > 1024) throw invalidArgument("text: 1 to 1024 bytes of UTF-8");
  return call("note", P.Operation.Note, true, (b) => {
    const qo = createString(b, q);
    const io = createString(b, i);
    const to = createString(b, t);
    P.Note.startNote(b);
    P.Note.addQueue(b, qo);
    P.Note.addId(b, io);
    P.Note.addLeaseToken(b, token);
    P.Note.addText(b, to);
    return P.Note.endNote(b);
  }, (response) => {
    expect(response, P.Result.Done, new P.Done(), "note");
  });
}

export function stats(): Call<Stats> {
  return call("stats", P.Operation.Stats, false, (b) => {
    P.Stats.startStats(b);
    return P.Stats.endStats(b);
  }, (response) => decodeStats(expect(response, P.Result.StatsResult, new P.StatsResult(), "stats")));
}

export function health(): Call<Health> {
  return call("health", P.Operation.Health, false, (b) => {
    P.Health.startHealth(b);
    return P.Health.endHealth(b);
  }, (response) => {
    const r = expect(response, P.Result.HealthResult, new P.HealthResult(), "health");
    return { live: r.live(), ready: r.ready(), reason: text(r.reason()) };
  });
}

/** Each id's Outcome once every one is terminal, or after wait_ms with what is terminal so far. */
export function wait(queue: unknown, ids: unknown, waitMs: unknown): Call<Outcome[]> {
  const q = str("queue", queue);
  if (!Array.isArray(ids) || ids.length === 0 || ids.length > MAX_BATCH) {
    throw invalidArgument(`ids: must be an array of 1 to ${MAX_BATCH} ids`);
  }
  const list = ids.map((id, k) => str(`ids[${k}]`, id));
  const w = waitMsOf(waitMs);
  return call("wait", P.Operation.Wait, false, (b) => {
    const io = stringVector(b, list);
    const qo = createString(b, q);
    P.Wait.startWait(b);
    P.Wait.addQueue(b, qo);
    P.Wait.addIds(b, io);
    if (w) P.Wait.addWaitMs(b, w);
    return P.Wait.endWait(b);
  }, (response) => {
    const r = expect(response, P.Result.WaitResult, new P.WaitResult(), "wait");
    const out: Outcome[] = [];
    for (let i = 0, n = r.itemsLength(); i < n; i++) out.push(decodeOutcome(r.items(i)!));
    return out;
  }, { waitMs: w });
}

function decodeMember(m: P.ClusterMember): ClusterMember {
  return {
    node: text(m.node()),
    role: enumName(NODE_ROLES, m.role()),
    addr: text(m.addr()),
    http_addr: text(m.httpAddr()),
    replication_addr: text(m.replicationAddr()),
    epoch: Number(m.epoch()),
    end_lsn: Number(m.endLsn()),
    flushed_lsn: Number(m.flushedLsn()),
    lag_records: Number(m.lagRecords()),
    lag_ms: Number(m.lagMs()),
    sync: m.sync(),
  };
}

/** The cluster as the node that answers sees it; any node answers. */
export function cluster(): Call<Cluster> {
  return call("cluster", P.Operation.Cluster, false, (b) => {
    P.Cluster.startCluster(b);
    return P.Cluster.endCluster(b);
  }, (response) => {
    const r = expect(response, P.Result.ClusterResult, new P.ClusterResult(), "cluster");
    const members: ClusterMember[] = [];
    for (let i = 0, n = r.membersLength(); i < n; i++) members.push(decodeMember(r.members(i)!));
    return {
      cluster: text(r.cluster()),
      node: text(r.node()),
      epoch: Number(r.epoch()),
      primary: text(r.primary()),
      primary_addr: text(r.primaryAddr()),
      sync_standby: text(r.syncStandby()),
      replication: text(r.replication()),
      members,
    };
  }, { anyNode: true });
}

/** A planned change of primary to `to` (a node name; absent: the synchronous standby). */
export function switchover(to: unknown): Call<void> {
  const t = to === undefined || to === null ? "" : str("to", to);
  return call("switchover", P.Operation.Switchover, false, (b) => {
    const to = t ? createString(b, t) : 0;
    P.Switchover.startSwitchover(b);
    if (to) P.Switchover.addTo(b, to);
    return P.Switchover.endSwitchover(b);
  }, (response) => {
    expect(response, P.Result.Done, new P.Done(), "switchover");
  }, { resend: false });
}

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/**
 * A ULID like the server's (docs/semantics.md, "Enqueue"): 26 characters of Crockford base32, a
 * 48-bit ms timestamp then 80 random bits. A client following a primary gives one to each
 * enqueued message without an id, so that sending it again cannot enqueue twice.
 */
export function newMessageId(): string {
  let value = (BigInt(Date.now()) & 0xffffffffffffn) << 80n;
  value |= BigInt("0x" + randomBytes(10).toString("hex"));
  let out = "";
  for (let shift = 125n; shift >= 0n; shift -= 5n) out += CROCKFORD[Number((value >> shift) & 31n)];
  return out;
}

export function auth(token: unknown): Call<void> {
  const t = str("token", token);
  return call("auth", P.Operation.Auth, false, (b) => {
    const to = createString(b, t);
    P.Auth.startAuth(b);
    P.Auth.addToken(b, to);
    return P.Auth.endAuth(b);
  }, (response) => {
    expect(response, P.Result.AuthResult, new P.AuthResult(), "auth");
  });
}

// ---- Subscriptions (WebSocket only: watch.ts) --------------------------------------------------

export interface SubscribeOptions {
  filter?: Metadata;
  ids?: string[];
  queue_stats?: boolean;
  max_events_per_sec?: number;
}

export const SUBSCRIBE_KEYS = ["filter", "ids", "queue_stats", "max_events_per_sec"] as const;

export function subscribe(queue: unknown, options: SubscribeOptions): Call<void> {
  const q = str("queue", queue);
  const f = pairs("filter", options.filter);
  const ids = options.ids === undefined ? [] : Array.isArray(options.ids) ? options.ids.map((id) => str("ids", id)) : [str("ids", options.ids)];
  const stats = options.queue_stats === undefined ? false : bool("queue_stats", options.queue_stats);
  const rate = optional(options.max_events_per_sec, (x) => uint32("max_events_per_sec", x));
  return call("subscribe", P.Operation.Subscribe, false, (b) => {
    const qo = createString(b, q);
    const fo = f.length ? pairVector(b, f) : 0;
    const io = ids.length ? stringVector(b, ids) : 0;
    P.Subscribe.startSubscribe(b);
    P.Subscribe.addQueue(b, qo);
    if (fo) P.Subscribe.addFilter(b, fo);
    if (stats) P.Subscribe.addQueueStats(b, true);
    if (rate !== undefined) addPresent(b, () => P.Subscribe.addMaxEventsPerSec(b, rate));
    if (io) P.Subscribe.addIds(b, io);
    return P.Subscribe.endSubscribe(b);
  }, (response) => {
    expect(response, P.Result.SubscribeResult, new P.SubscribeResult(), "subscribe");
  });
}

/** What one ServerMessage on a subscription holds. */
export type ServerFrame =
  | { kind: "response"; response: P.Response }
  | { kind: "event"; event: WatchEvent }
  | { kind: "closed"; reason: string };

export function readServerFrame(frame: Uint8Array): ServerFrame | null {
  const bodyTable = checkServerMessage(frame);
  const message = P.ServerMessage.getRootAsServerMessage(byteBuffer(frame));
  const body = message.bodyType();
  if (body === P.ServerBody.Response) {
    checkResponse(frame, bodyTable);
    return { kind: "response", response: message.body(new P.Response()) as P.Response };
  }
  if (body !== P.ServerBody.EventMessage) return null;
  if (bodyTable < 0) malformed("an EventMessage without its table");
  fieldTable(frame, bodyTable, 6, "event"); // EventMessage.event: field 1
  const event = message.body(new P.EventMessage()) as P.EventMessage;
  switch (event.eventType()) {
    case P.Event.MessageEvent: {
      const e = event.event(new P.MessageEvent()) as P.MessageEvent;
      return {
        kind: "event",
        event: {
          type: "message",
          queue: text(e.queue()),
          id: text(e.id()),
          from: stateName(e.from()),
          to: stateName(e.to()),
          version: Number(e.version()),
          time: Number(e.time()),
          cause: text(e.cause()),
        },
      };
    }
    case P.Event.StatsTick: {
      const t = event.event(new P.StatsTick()) as P.StatsTick;
      const stats = t.stats();
      const queues: QueueStats[] = [];
      for (let i = 0, n = t.queuesLength(); i < n; i++) {
        const s = t.queues(i)!;
        const info = s.queue();
        if (info === null) continue; // the server always sets it; a tick without it is skipped
        queues.push({
          queue: decodeQueue(info),
          enqueued: Number(s.enqueued()),
          dequeued: Number(s.dequeued()),
          completed: Number(s.completed()),
          failed: Number(s.failed()),
          lease_expired: Number(s.leaseExpired()),
          canceled: Number(s.canceled()),
          errored: Number(s.errored()),
          redriven: Number(s.redriven()),
          dead_lettered: Number(s.deadLettered()),
        });
      }
      return {
        kind: "event",
        event: { type: "stats", time: Number(t.time()), stats: stats === null ? ZERO_STATS : decodeStats(stats), queues },
      };
    }
    case P.Event.SubscriptionClosed: {
      const c = event.event(new P.SubscriptionClosed()) as P.SubscriptionClosed;
      return { kind: "closed", reason: text(c.reason()) };
    }
    default:
      return null; // an event of a newer server: skipped
  }
}
