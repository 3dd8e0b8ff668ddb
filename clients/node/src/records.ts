// The values the client returns: plain objects with the protocol's field names (snake_case, as
// docs/protocol.md spells them). Times are ms since the Unix epoch (0 when unset); states are
// strings. 64-bit integers are JavaScript numbers: lease tokens are below 2^53 by the server's
// rule, and docs/protocol.md#the-json-form asks JavaScript users to keep priorities within
// ±2^53 (a priority beyond that is read rounded).

import type { SundialError } from "./errors";

export const STATES = ["invisible", "pending", "running", "completed", "canceled", "errored", "waiting"] as const;
export type State = (typeof STATES)[number];

export const QUEUE_TYPES = ["simple", "exclusive"] as const;
export type QueueType = (typeof QUEUE_TYPES)[number];

/** Whether an enqueue releases a terminal message's id (docs/semantics.md, "Flow control"). */
export const DEDUPES = ["keep", "while_active"] as const;
export const FAIRNESSES = ["none", "weighted"] as const;
export type Fairness = (typeof FAIRNESSES)[number];
export type Dedupe = (typeof DEDUPES)[number];

export const EXPLAIN_REASONS = [
  "dequeueable",
  "invisible",
  "exclusivity_held",
  "queue_paused",
  "no_match",
  "attempts_spent",
  "running",
  "terminal",
  "waiting_on_dependencies",
  "key_concurrency",
  "key_rate",
  "queue_rate",
  "fair_share",
] as const;
export type ExplainReason = (typeof EXPLAIN_REASONS)[number];

/** Metadata, and filters: string keys to string values. */
export type Metadata = Record<string, string>;

/** A message as dequeue and get return it. */
export interface Message {
  queue: string;
  id: string;
  priority: number;
  payload: Buffer;
  metadata: Metadata;
  state: State;
  attempts: number;
  max_attempts: number;
  /** Invisible only: when it becomes pending. */
  visible_at: number;
  /** Running: the lease that complete, fail and extend must present (completed: the one that completed it). */
  lease_token: number;
  /** Running only. */
  lease_expires_at: number;
  version: number;
  enqueued_at: number;
  updated_at: number;
  last_error: string;
  /** Completed: the result its complete carried (empty when none). */
  result: Buffer;
  /**
   * With include_dependency_results (dequeue): one Outcome per dependency listed at enqueue, in
   * order, its `id` "queue/id"; absent when not asked or when it has none.
   */
  dependency_results?: Outcome[];
  /** When its ttl runs out (docs/semantics.md, "Expiry"); 0: no ttl. */
  expires_at: number;
}

/** What happens to a waiting message when a dependency is canceled or errored (default cancel). */
export const DEPENDENCY_FAILURE_POLICIES = ["cancel", "release", "error"] as const;
export type DependencyFailurePolicy = (typeof DEPENDENCY_FAILURE_POLICIES)[number];

/**
 * A message's outcome as wait and call report it: `state` is terminal ("completed",
 * "canceled", "errored") once the message has finished; `done` says so. `error`: this id's
 * error (NOT_FOUND: no such message, or gone to retention or a dead-letter queue).
 */
export interface Outcome {
  id: string;
  state: State;
  /** Completed: the result the worker's complete carried (empty when none). */
  result: Buffer;
  last_error: string;
  done: boolean;
  error: SundialError | null;
}

/** One enqueued message. `duplicate`: the same id with identical content existed (nothing changed). */
export interface EnqueueResult {
  id: string;
  version: number;
  duplicate: boolean;
  /** enqueueBatch only: this item's error (the others were enqueued); else null. */
  error: SundialError | null;
  /** Enqueued with wait_ms: the message's outcome when the reply was sent; else null. */
  outcome: Outcome | null;
}

/** Messages per state (`waiting`: on dependencies), and `blocked`: pending ones whose exclusivity value is leased. */
export interface Counts {
  invisible: number;
  pending: number;
  running: number;
  completed: number;
  canceled: number;
  errored: number;
  waiting: number;
  blocked: number;
}

/** A queue's settings (docs/semantics.md), as createQueue takes them. */
export interface QueueSettings {
  type?: QueueType;
  exclusivity_key?: string;
  lease_ms?: number;
  invisibility_ms?: number;
  max_attempts?: number;
  retry_backoff_ms?: number;
  retry_backoff_max_ms?: number;
  dead_letter_queue?: string;
  retention_ms?: number;
  max_depth?: number;
  enqueue_paused?: boolean;
  dequeue_paused?: boolean;
  /** Entries of history kept per message (default 32); 0: none (docs/semantics.md, "History"). */
  history_max?: number;
  /**
   * The metadata key whose values key_concurrency limits (1–64 bytes), fixed at creation; an
   * exclusive queue's may only be its exclusivity_key (docs/protocol.md, "CreateQueue").
   */
  flow_key?: string;
  /** Messages per flow-key value running at once, 0–1,000,000 (0: no limit); needs a flow_key. */
  key_concurrency?: number;
  /** A message's default time to live from its enqueue; 0: none (docs/semantics.md, "Expiry"). */
  ttl_ms?: number;
  /** "keep" (default) or "while_active": an enqueue releases a terminal message's id. */
  dedupe?: Dedupe;
  /**
   * The queue's token bucket (docs/semantics.md, "Rates"): dequeues per second, 0.001–1,000,000
   * with at most 3 decimals (0: none), and its size, 1–1,000,000 (default 1).
   */
  rate_per_s?: number;
  burst?: number;
  /** The same for each flow-key value (needs a flow_key). */
  key_rate_per_s?: number;
  key_burst?: number;
  /** "weighted": turns among the flow-key values (docs/semantics.md, "Fair share"). */
  fairness?: Fairness;
  /** With weighted: a message overdue (past its priority) by more than this jumps the turns; 0: never. */
  overdue_first_ms?: number;
}

/** What updateQueue may change: every setting but `type`, `exclusivity_key` and `flow_key`. */
export type QueueSettingsUpdate = Omit<QueueSettings, "type" | "exclusivity_key" | "flow_key">;

/** A queue: its settings, per-state counts, the age of its oldest pending message, its memory. */
export interface Queue {
  name: string;
  type: QueueType;
  /** null unless exclusive. */
  exclusivity_key: string | null;
  lease_ms: number;
  invisibility_ms: number;
  max_attempts: number;
  retry_backoff_ms: number;
  retry_backoff_max_ms: number;
  /** null when it has none. */
  dead_letter_queue: string | null;
  retention_ms: number;
  max_depth: number;
  enqueue_paused: boolean;
  dequeue_paused: boolean;
  history_max: number;
  /** null when it has none. */
  flow_key: string | null;
  /** 0: no limit. */
  key_concurrency: number;
  ttl_ms: number;
  dedupe: Dedupe;
  /** 0: no queue rate. */
  rate_per_s: number;
  burst: number;
  /** 0: no key rate. */
  key_rate_per_s: number;
  key_burst: number;
  fairness: Fairness;
  overdue_first_ms: number;
  counts: Counts;
  oldest_pending_age_ms: number;
  memory_bytes: number;
}

/** What fail did: the new state, visible_at when invisible, the dead-letter queue if it moved there. */
export interface FailResult {
  state: State;
  visible_at: number;
  dead_letter_queue: string | null;
}

/**
 * What a complete or fail with `next` (complete-and-next) answered: per completed item null or
 * its error (fail: none), the messages `next` leased, and the dequeue's error when it was refused
 * (the completion stands either way: docs/semantics.md, "Complete-and-next").
 */
export interface NextResult {
  errors: (SundialError | null)[];
  next: Message[];
  next_error: SundialError | null;
  /** fail with `next` only: what the fail did. */
  fail?: FailResult;
}

/** A node of a cluster as `cluster()` lists it. */
export interface ClusterMember {
  node: string;
  role: NodeRole;
  /** The binary TCP port clients use (host:port). */
  addr: string;
  http_addr: string;
  replication_addr: string;
  epoch: number;
  end_lsn: number;
  flushed_lsn: number;
  lag_records: number;
  lag_ms: number;
  /** The published synchronous standby. */
  sync: boolean;
}

export const NODE_ROLES = ["standalone", "primary", "standby", "unknown"] as const;
export type NodeRole = (typeof NODE_ROLES)[number];

/** The cluster as one node sees it (docs/operations.md, "High availability"). */
export interface Cluster {
  /** Empty: the server is not in a cluster. */
  cluster: string;
  /** The node that answered. */
  node: string;
  epoch: number;
  /** The primary's node name; empty while none is known (an election is under way). */
  primary: string;
  /** And its client address. */
  primary_addr: string;
  sync_standby: string;
  /** "sync" or "async". */
  replication: string;
  members: ClusterMember[];
}

/** A message as browse lists it (no payload or metadata). */
export interface MessageSummary {
  id: string;
  priority: number;
  state: State;
  attempts: number;
  version: number;
  visible_at: number;
  lease_expires_at: number;
  enqueued_at: number;
  updated_at: number;
  /** 0: no ttl. */
  expires_at: number;
}

/** One page of browse; `next_cursor` is "" at the end. */
export interface BrowsePage {
  messages: MessageSummary[];
  next_cursor: string;
}

/** Why a message (or a dequeue with a filter) is or is not dequeueable now (docs/protocol.md#explain). */
export interface Explanation {
  reason: ExplainReason;
  id: string;
  state: State;
  until: number;
  lease_token: number;
  exclusivity_value: string;
  attempts: number;
  /** Waiting on its dependencies: how many it has, how many are not finished, the first 10 of those ("queue/id"). */
  dependencies: number;
  unfinished: number;
  waiting_on: string[];
  /** Explain by id: the first 10 dependents still waiting on it ("queue/id"), and how many wait in all. */
  dependents: string[];
  waiting_dependents: number;
  /** Held by its flow key (exclusivity_held, key_concurrency): the value's running messages and the queue's key_concurrency ("key acme 5/5 running"). */
  key_running: number;
  key_concurrency: number;
}

/** One entry of a message's history (docs/protocol.md#history). */
export interface HistoryEntry {
  /** ms since the epoch. */
  time: number;
  /** "enqueued", "leased", "completed", "failed", ... "dead_lettered", "noted". */
  event: string;
  from: State;
  to: State;
  /** 0: none. */
  attempt: number;
  /** 0: none. */
  lease_token: number;
  /** "request", "worker", "timer", "dependency" or "engine". */
  actor: string;
  /** The worker_id the lease's dequeue gave ("" when none). */
  worker_id: string;
  /** leased: the worker_id; failed, dependency_failed, dead_lettered: the error; noted: the note. */
  text: string;
}

/** A message's history, oldest first; past the queue's history_max the first and the latest are kept and `dropped` counts the rest. */
/** What set_key_limits overrides for one flow-key value (docs/semantics.md, "Per-key limits"). */
export interface KeyLimits {
  /** Its messages running at once (0: no limit). */
  concurrency?: number;
  /** Its dequeues per second (0: no rate; at most 3 decimals). */
  rate_per_s?: number;
  burst?: number;
  /** Its share under fairness weighted, 1–1000. */
  weight?: number;
}

/** A flow-key value: its overrides, the limits in effect, its messages now. */
export interface KeyInfo {
  value: string;
  overrides: KeyLimits;
  concurrency: number;
  rate_per_s: number;
  burst: number;
  weight: number;
  pending: number;
  running: number;
  /** Running at its concurrency. */
  held: boolean;
  /** Out of tokens: when its next one comes (ms); else 0. */
  next_token: number;
}

export const KEY_ORDERS = ["pending", "running", "throttled"] as const;
export type KeyOrder = (typeof KEY_ORDERS)[number];

export interface History {
  entries: HistoryEntry[];
  dropped: number;
}

/** The server's figures (docs/protocol.md#stats). */
export interface Stats {
  uptime_ms: number;
  queues: number;
  messages: Counts;
  memory_bytes: number;
  memory_budget_bytes: number;
  connections: number;
  wal_next_lsn: number;
  wal_durable_lsn: number;
  wal_fsyncs: number;
  wal_fsync_mean_us: number;
  wal_bytes: number;
  wal_failed: boolean;
}

/** live, ready, and why not ready. */
export interface Health {
  live: boolean;
  ready: boolean;
  reason: string;
}

// ---- Subscription events (watch) --------------------------------------------------------------

/** A change of one message (docs/protocol.md#subscriptions lists the causes). */
export interface MessageEvent {
  type: "message";
  queue: string;
  id: string;
  from: State;
  to: State;
  version: number;
  time: number;
  cause: string;
}

/** One queue's figures and transition totals in a stats tick (watch with `queue_stats`). */
export interface QueueStats {
  queue: Queue;
  enqueued: number;
  dequeued: number;
  completed: number;
  failed: number;
  lease_expired: number;
  canceled: number;
  errored: number;
  redriven: number;
  dead_lettered: number;
}

/** Every second: the server's figures, and with `queue_stats` every queue's. */
export interface StatsTick {
  type: "stats";
  time: number;
  stats: Stats;
  queues: QueueStats[];
}

/**
 * Not a change: a watch of a client that follows a cluster lost its subscription (the primary
 * died, was demoted, or ended it) and has subscribed again on the primary at `address` (node
 * `node`, `epoch`), at `time` (ms). Changes made between the last event before this marker and
 * `time` were not delivered and are not replayed: read the state again if they matter. `error`
 * ended the previous subscription.
 */
export interface Resubscribed {
  type: "resubscribed";
  address: string;
  node: string;
  epoch: number;
  time: number;
  error: SundialError;
}

export type WatchEvent = MessageEvent | StatsTick | Resubscribed;

// ---- Schedules and batches (docs/semantics.md, "Schedules" and "Batches") -------------------

export const MISFIRE_POLICIES = ["skip", "one", "all"] as const;
export type MisfirePolicy = (typeof MISFIRE_POLICIES)[number];
export const OVERLAP_POLICIES = ["allow", "skip_if_active"] as const;
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

/** A schedule as the server holds it: its spec, then its progress (times in ms; 0: none). */
export interface Schedule {
  queue: string;
  name: string;
  /** 5 fields or a macro, in `tz` ("" : UTC); "" when timed by every_ms. */
  cron: string;
  tz: string;
  every_ms: number;
  payload: Buffer;
  metadata: Metadata;
  /** A fire at T enqueues name@T at priority T + this. */
  priority_offset_ms: number;
  /** 0: the queue's default. */
  max_attempts: number;
  misfire: MisfirePolicy;
  overlap: OverlapPolicy;
  paused: boolean;
  /** 0 while paused. */
  next_fire_at: number;
  /** The latest fire made, enqueued or skipped. */
  last_fire_at: number;
  /** The latest fire that enqueued name@T. */
  last_enqueued_at: number;
  /** Fires that enqueued (a duplicate included). */
  fires: number;
  /** Fires skipped by skip_if_active. */
  overlap_skips: number;
  /** Fires dropped by the misfire policy. */
  missed: number;
  /** Fires whose enqueue was refused; last_error says why. */
  failed: number;
  last_error: string;
  created_at: number;
  updated_at: number;
}

/** The fire triggerSchedule made. */
export interface ScheduleTrigger {
  /** name@T */
  id: string;
  fire_at: number;
  /** A fire at the same T existed already. */
  duplicate: boolean;
}

/** The message a batch enqueues once done (its id resolved: "batch:<id>" by default). */
export interface BatchCallback {
  queue: string;
  id: string;
  priority: number;
  payload: Buffer;
  metadata: Metadata;
  /** null: the queue's default. */
  max_attempts: number | null;
}

/** A batch and its members per outcome (active: not terminal yet). */
export interface Batch {
  id: string;
  callback: BatchCallback | null;
  retention_ms: number;
  created_at: number;
  sealed: boolean;
  /** Sealed and no member active: the callback was enqueued. */
  done: boolean;
  done_at: number;
  members: number;
  active: number;
  completed: number;
  /** Canceled, purged, or deleted with their queue. */
  canceled: number;
  /** Errored, or moved to a dead-letter queue. */
  errored: number;
}

/** One node of an enqueueFlow, in pre-order (a node, then each child's subtree in order). */
export interface FlowNodeResult {
  queue: string;
  id: string;
  version: number;
  /** The node's tree was a resend (its root existed with the same content). */
  duplicate: boolean;
}
