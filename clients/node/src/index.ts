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
  DequeueOptions,
  EnqueueOptions,
  FailOptions,
  GetOptions,
  MutationOptions,
  ReprioritizeOptions,
  SwitchoverOptions,
  WaitOptions,
  WatchOptions,
} from "./client";
export type { CompleteItem, Durability, EnqueueItem, NextOptions, Payload } from "./codec";
export { SundialError } from "./errors";
export type { ErrorCode, ErrorOrigin } from "./errors";
export { DEPENDENCY_FAILURE_POLICIES, NODE_ROLES, STATES } from "./records";
export type {
  BrowsePage,
  Cluster,
  ClusterMember,
  Counts,
  DependencyFailurePolicy,
  EnqueueResult,
  Explanation,
  ExplainReason,
  FailResult,
  Health,
  Message,
  MessageEvent,
  MessageSummary,
  Metadata,
  NextResult,
  NodeRole,
  Outcome,
  Queue,
  QueueSettings,
  QueueSettingsUpdate,
  QueueStats,
  QueueType,
  Resubscribed,
  State,
  Stats,
  StatsTick,
  WatchEvent,
} from "./records";
export { Watch } from "./watch";
export { Worker, errorText } from "./worker";
export type { Handler, Logger, WorkerOptions } from "./worker";

export const VERSION = "0.1.0";
