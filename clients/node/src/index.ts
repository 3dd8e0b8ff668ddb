// sundial-client: the TypeScript client and worker of Sundial (docs/clients/typescript.md).
//
//   import { Client, Worker, SundialError } from "sundial-client";
//
// The protocol code (./generated) is written by flatc --ts from protocol/sundial.fbs when the
// package is built (scripts/build.js); it is never kept in the repository.

export { Client, DEFAULT_TIMEOUT_MS } from "./client";
export type {
  BrowseOptions,
  CallMessageOptions,
  CallOptions,
  ClientOptions,
  CompleteOptions,
  CountOptions,
  CreateBatchOptions,
  DequeueOptions,
  EnqueueOptions,
  FailOptions,
  FlowNode,
  GetOptions,
  ListKeysOptions,
  MutationOptions,
  ReprioritizeOptions,
  ScheduleSpec,
  SwitchoverOptions,
  WaitOptions,
  WatchOptions,
} from "./client";
export type { CompleteItem, Durability, EnqueueItem, NextOptions, Payload } from "./codec";
export { SundialError } from "./errors";
export type { ErrorCode, ErrorOrigin } from "./errors";
export { DEPENDENCY_FAILURE_POLICIES, MISFIRE_POLICIES, NODE_ROLES, OVERLAP_POLICIES, STATES } from "./records";
export type {
  Batch,
  BatchCallback,
  BrowsePage,
  Cluster,
  ClusterMember,
  Counts,
  DependencyFailurePolicy,
  EnqueueResult,
  Explanation,
  ExplainReason,
  FailResult,
  FlowNodeResult,
  Health,
  History,
  HistoryEntry,
  KeyInfo,
  KeyLimits,
  KeyOrder,
  Message,
  MessageEvent,
  MisfirePolicy,
  MessageSummary,
  Metadata,
  NextResult,
  NodeRole,
  Outcome,
  OverlapPolicy,
  Queue,
  QueueSettings,
  QueueSettingsUpdate,
  QueueStats,
  QueueType,
  Resubscribed,
  Schedule,
  ScheduleTrigger,
  State,
  Stats,
  StatsTick,
  WatchEvent,
} from "./records";
export { Watch } from "./watch";
export { Worker, errorText } from "./worker";
export type { Handler, Logger, WorkerOptions } from "./worker";

export const VERSION = "0.1.0";
