// Type declarations for pg-claim (hand-written; the package is plain JavaScript).

import { EventEmitter } from 'events';
import type { Pool, PoolClient, PoolConfig, ClientBase } from 'pg';

/** Milliseconds (number) or a PostgreSQL interval ('30 seconds'). */
export type Duration = number | string;

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * A claimed item, as the handler sees it. Ids and tokens are bigint, given as
 * decimal strings. A token is a string end to end: the worker reads it as
 * text, so no int8 type parser of the pool (such as setTypeParser(20,
 * parseInt)) can change it, and sends it back as given. Every token of
 * pg_claim 0.3.0 is at most 2^53 - 1 (Number.MAX_SAFE_INTEGER), so
 * Number(job.token) and BigInt(job.token) are exact too.
 */
export interface Job<P = any> {
  queue: string;
  id: string;
  token: string;
  payload: P;
  /** Deliveries of this item so far, this one included (1 on the first). */
  attempt: number;
  groupKey: string | null;
  enqueuedAt: Date;
  /** The lease end on the server's clock (moved by each heartbeat). */
  leaseUntil: Date;
}

export interface JobContext {
  /**
   * Aborted when the item's lease was lost (a heartbeat got a stale token) or
   * when the worker stopped and its grace period ended; the outcome is then
   * dropped, so the handler may give up.
   */
  signal: AbortSignal;
  /** In transactional mode: the connection whose transaction already asserted the token; otherwise null. */
  client: PoolClient | null;
  worker: Worker;
  /** Extends the lease now (the heartbeat does this on its own). */
  extend(lease?: Duration | null): Promise<Date>;
}

export type Handler<P = any, R = unknown> = (job: Job<P>, ctx: JobContext) => Promise<R> | R;

export interface Logger {
  info?(message: string): void;
  warn?(message: string): void;
  error?(message: string): void;
}

/** Where to connect. With none of the three: $PG_CLAIM_DSN, else libpq's PG* variables. */
export interface ConnectionOptions {
  /** A libpq-style URL, for a pool the worker or client creates and ends. */
  connectionString?: string;
  /** Options for that pool (pg.PoolConfig). */
  poolConfig?: PoolConfig;
  /** A pool of yours; it is used and not ended. */
  pool?: Pool;
}

export interface WorkerOptions<P = any, R = unknown> extends ConnectionOptions {
  queue: string;
  handler: Handler<P, R>;
  /** Handlers running at once (default 1). */
  concurrency?: number;
  /**
   * Lease of each claim and each extension (default: the queue's): an
   * interval ('30 s'). A plain number is milliseconds and warns (Python
   * reads it as seconds): use leaseMs.
   */
  lease?: Duration | null;
  /** The lease in milliseconds. */
  leaseMs?: number;
  /** How long one claim waits inside the server for work: an interval (default '5 s', at most 1 hour). */
  wait?: Duration;
  /** The wait in milliseconds. */
  waitMs?: number;
  /** After stop(): how long running handlers may take before their items are released: an interval (default '30 s'). */
  grace?: Duration;
  /** The grace period in milliseconds. */
  graceMs?: number;
  /** Run each handler in a transaction that asserted the token; the completion commits with its writes. */
  transactional?: boolean;
  /** Aborting it stops the worker, as stop() does. */
  signal?: AbortSignal;
  /** Extend live leases at about a third of their length (default true). */
  heartbeat?: boolean;
  /**
   * Complete finished items on the next claim (claim_next(done => ...), on
   * servers that have it) instead of on a connection of their own (default false).
   */
  piggyback?: boolean;
  /** Claim loops, each on its own connection, each claiming up to concurrency/lanes items (default 1). */
  lanes?: number;
  /** Worker name recorded with each claim (default <host>:<pid>). */
  worker?: string;
  /**
   * Deadline of each statement of the worker's own, and of connecting, in
   * milliseconds (default 30000; a claim gets its wait plus this): a
   * connection that stopped answering fails the call instead of hanging it.
   */
  callTimeout?: Duration;
  /** The call deadline in milliseconds. */
  callTimeoutMs?: number;
  logger?: Logger;
}

export interface WorkerStats {
  claimed: number;
  completed: number;
  failed: number;
  stale: number;
  released: number;
  claimCalls: number;
  /** Lease extensions made (heartbeats and ctx.extend()). */
  extended: number;
  /** Statements that made them (plain mode extends the jobs due together in one). */
  extendCalls: number;
}

export type Outcome = 'completed' | 'failed' | 'stale' | 'released' | 'dropped';

export declare class Worker<P = any, R = unknown> extends EventEmitter {
  constructor(options: WorkerOptions<P, R>);
  readonly queue: string;
  readonly concurrency: number;
  readonly transactional: boolean;
  readonly lanes: number;
  /** Whether claims carry completions; known once run() started. */
  readonly piggyback: boolean;
  readonly stats: WorkerStats;
  /** The pool in use; set once run() started. */
  readonly pool: Pool | null;
  readonly running: boolean;
  /**
   * Claims and runs items until stop() or the signal; resolves once everything
   * held is finished or released. Rejects at once with the error when a claim
   * meets one that no retry can fix (UnknownQueueError, InvalidArgumentError,
   * InvalidNameError, PermissionDeniedError, NotInstalledError,
   * NotSupportedError); other errors are retried with backoff.
   */
  run(): Promise<WorkerStats>;
  /** Stops claiming, lets running handlers finish up to `grace`, then releases what is still held. */
  stop(): Promise<void>;

  on(event: 'completed', listener: (job: Job<P>, result: R) => void): this;
  on(event: 'failed', listener: (job: Job<P>, error: unknown) => void): this;
  on(event: 'stale', listener: (job: Job<P>, error?: StaleTokenError) => void): this;
  on(event: 'released' | 'dropped', listener: (job: Job<P>) => void): this;
  on(event: 'settled', listener: (job: Job<P>, outcome: Outcome) => void): this;
  on(event: 'stopped', listener: () => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** Calls worker.stop() on SIGTERM and SIGINT (or the signals given); returns a function that removes the handlers. */
export declare function handleSignals(worker: Worker<any, any>, signals?: NodeJS.Signals[]): () => void;

export interface CallOptions {
  /** Run on this connection, inside its open transaction if it has one. */
  client?: ClientBase;
}

export interface EnqueueOptions extends CallOptions {
  groupKey?: string | null;
  runAt?: Date | string | null;
  priority?: number;
  dedupKey?: string | null;
  /** Ids this item waits for (servers with enqueue(..., after)). */
  after?: Array<string | number | bigint> | null;
  /** The item's key in a fair queue (servers with enqueue(..., fair_key); docs/fairness.md). */
  fairKey?: string | null;
}

export interface EnqueueBatchOptions extends CallOptions {
  groupKeys?: Array<string | null> | null;
  runAt?: Date | string | null;
  priority?: number;
  /** The key of every item of the batch in a fair queue (docs/fairness.md). */
  fairKey?: string | null;
  /** Ids of items every item of the batch waits for (each becomes ready once they all completed). */
  after?: Array<string | number | bigint> | null;
}

export type ItemStateName = 'waiting' | 'scheduled' | 'ready' | 'claimed' | 'completed' | 'dead' | 'cancelled';

export interface ItemState {
  state: ItemStateName;
  attempt: number | null;
  result: Json | null;
  error: string | null;
  finishedAt: Date | null;
}

export interface QueueStats {
  queue: string;
  /** Counts are null where the server cannot know them (a standby). */
  ready: number | null;
  scheduled: number | null;
  claimed: number | null;
  dead: number | null;
  /** A node-postgres interval object, or null. */
  oldestReadyAge: unknown;
  /** Items waiting for others (servers with enqueue(..., after)). */
  waiting?: number | null;
  /** Servers with claim.pause. */
  paused?: boolean;
}

export interface CreateQueueOptions extends CallOptions {
  lease?: Duration;
  maxAttempts?: number;
  backoff?: Duration;
  /** How long finished items stay visible to itemState (newer servers). */
  retain?: Duration;
  /** Newer servers: at most this many live claims in the queue. */
  maxActive?: number;
  /** Newer servers: live claims per group. */
  groupLimit?: number;
}

export declare class Client {
  constructor(options?: ConnectionOptions);
  readonly pool: Pool;
  /** Adds an item; resolves to its id. */
  enqueue(queue: string, payload?: Json, options?: EnqueueOptions): Promise<string>;
  /** Adds many items in one statement; resolves to their ids, in order. */
  enqueueBatch(queue: string, payloads: Json[], options?: EnqueueBatchOptions): Promise<string[]>;
  /** Cancels items, revoking live claims; resolves to how many. NotSupportedError without claim.cancel. */
  cancel(queue: string, ids: Array<string | number | bigint>, options?: CallOptions): Promise<number>;
  /** An item's state, or null; `wait` waits in the server for it to finish. NotSupportedError without claim.item_state. */
  itemState(queue: string, id: string | number | bigint, options?: CallOptions & { wait?: Duration }): Promise<ItemState | null>;
  /** claim.queue_stats, for all queues or one. */
  stats(queue?: string | null, options?: CallOptions): Promise<QueueStats[]>;
  /** Rows of claim.metrics(), as the server returns them. NotSupportedError without it. */
  metrics(options?: CallOptions): Promise<Array<Record<string, unknown>>>;
  createQueue(queue: string, options?: CreateQueueOptions): Promise<void>;
  dropQueue(queue: string, options?: CallOptions): Promise<void>;
  /** A fair key's weight in a fair queue, 1 to 10000 (admin). NotSupportedError without claim.set_fair_weight. */
  setFairWeight(queue: string, fairKey: string, weight: number, options?: CallOptions): Promise<void>;
  /** Stops deliveries from a queue. NotSupportedError without claim.pause. */
  pause(queue: string, options?: CallOptions): Promise<void>;
  resume(queue: string, options?: CallOptions): Promise<void>;
  /** Ends the pool if this Client created it. */
  close(): Promise<void>;
}

export declare class PgClaimError extends Error {
  /** The SQLSTATE, or null. */
  readonly code: string | null;
  readonly detail?: string;
  readonly hint?: string;
  readonly cause?: unknown;
}
/** PC001 */
export declare class StaleTokenError extends PgClaimError {}
/** PC002 */
export declare class PermitMismatchError extends PgClaimError {}
/** 42704 */
export declare class UnknownQueueError extends PgClaimError {}
/** 22023, 22004, 22007, 22008, 22P02, 22003, or an option the function does not have */
export declare class InvalidArgumentError extends PgClaimError {}
/** 42501 */
export declare class PermissionDeniedError extends PgClaimError {}
/** 25006 */
export declare class ReadOnlyError extends PgClaimError {}
/** 42710 */
export declare class DuplicateQueueError extends PgClaimError {}
/** 42602 */
export declare class InvalidNameError extends PgClaimError {}
/** 57014 */
export declare class QueryCanceledError extends PgClaimError {}
/** The server's pg_claim lacks the function a call needs (42883, 0A000). */
export declare class NotSupportedError extends PgClaimError {}
/** 3F000 on schema claim: the database has no pg_claim. */
export declare class NotInstalledError extends PgClaimError {}
/** Lost or refused connection (class 08, or no SQLSTATE), 40001, 40P01, 57P01-57P03, 53xxx, 55P03. */
export declare class TransientError extends PgClaimError {}
/** 3D000, 28000, 28P01: an unknown database or role, a wrong password; workers stop at once. */
export declare class BadConnectionError extends PgClaimError {}

/** Thrown by a handler: the item fails and is ready again after `afterMs`. */
export declare class RetryError extends Error {
  constructor(afterMs: number, message?: string);
  readonly afterMs: number;
}

/** The pg_claim class for a driver error (by SQLSTATE); a lost connection is a TransientError; other errors without a SQLSTATE are returned unchanged. */
export declare function mapError(err: unknown): unknown;
/** The class for a SQLSTATE (PgClaimError when none matches). */
export declare function errorClass(code: string, message?: string): typeof PgClaimError;
/** True when no retry can fix the error. */
export declare function isFatal(err: unknown): boolean;
/** True for an error a later try may not meet. */
export declare function isTransient(err: unknown): boolean;
/** <host>:<pid>, the default worker name. */
export declare function defaultWorkerName(): string;
export declare function isStale(err: unknown): boolean;

/** 32-bit FNV-1a of the UTF-8 bytes of key, as a signed int4 (0 for null): the front's claim.route_hash. */
export declare function routeHash(key: string | null | undefined): number;
/** The partition bits of a token: 52..47, or 62..53 above 2^53 - 1. */
export declare function tokenPartition(token: number | string | bigint): number;
/** The partition of a spread queue that holds the items of key: the front's claim.spread_partition. */
export declare function spreadPartition(partitions: number[], key: string | null): number;

/** A partition that cannot be reached (PC003 at the front). */
export declare class PartitionUnreachableError extends Error {
  readonly code: 'PC003';
  readonly partition: number;
}

/** Calls routed to the partitions directly, without the PL/Proxy front (docs/partitions.md). */
export declare class PartitionedClient {
  constructor(options: { partitions: string[]; spreadWaitSlice?: number; poolSize?: number });
  end(): Promise<void>;
  partitionOf(key: string): number;
  spreadPartitions(queue: string): Promise<number[] | null>;
  enqueue(queue: string, payload?: unknown,
          options?: { groupKey?: string | null; runAt?: Date | string | null; priority?: number; dedupKey?: string | null }): Promise<string>;
  claimNext(queue: string, n?: number, options?: { lease?: string | null; wait?: number }): Promise<Array<Record<string, unknown>>>;
  complete(token: number | string | bigint, result?: unknown): Promise<number>;
  completeMany(tokens: Array<number | string | bigint>, skipStale?: boolean): Promise<number>;
  fail(token: number | string | bigint, error?: string | null, retryIn?: string | null): Promise<number>;
  release(token: number | string | bigint): Promise<number>;
}

/** Thrown inside a durable function when its run is parked; let it through. */
export declare class Suspended extends Error {}

/** What a durable function gets (docs/steps.md): the run's item and the durable calls. */
export interface DurableContext<P = any> {
  readonly client: ClientBase;
  readonly queue: string;
  readonly id: string;
  readonly token: string;
  readonly payload: P;
  readonly attempt: number;
  /** An idempotency key for step `name` of this run, the same on every delivery. */
  key(name: string): string;
  /** The recorded output of step `name`, else runs fn() (at least once) and records it. */
  step<T extends Json | void>(name: string, fn: () => T | Promise<T>): Promise<T>;
  /** The same, fn(client) inside the transaction that records the step (exactly once). */
  transaction<T extends Json | void>(name: string, fn: (client: ClientBase) => T | Promise<T>): Promise<T>;
  /** Parks the run: milliseconds, an interval string, or until a Date. */
  sleep(duration: Duration | Date, name?: string): Promise<void>;
  awaitEvent<T extends Json = Json>(event: string, timeout?: Duration): Promise<T>;
  awaitChildren<T extends Json = Json>(children: Array<string | number | bigint>): Promise<T[]>;
}
/** The name index.js exports the context class under. */
export declare const DurableContext: unknown;

export type DurableOutcome = 'completed' | 'suspended' | 'failed' | 'stale';

/** A durable function and its runner (made by durable()). */
export declare class Durable<P = any, R = unknown> {
  constructor(fn: (ctx: DurableContext<P>) => Promise<R>);
  stop(): void;
  runOne(client: ClientBase, queue: string,
         options?: { wait?: Duration; lease?: Duration | null; worker?: string | null }): Promise<DurableOutcome | null>;
  run(queue: string, options?: { connectionString?: string; wait?: Duration; lease?: Duration | null;
                                 worker?: string | null; maxRuns?: number }): Promise<number>;
}

/** Makes fn(ctx) a durable function: durable(fn).run(queue, options). */
export declare function durable<P = any, R = unknown>(fn: (ctx: DurableContext<P>) => Promise<R>): Durable<P, R>;
