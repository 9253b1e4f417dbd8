'use strict';

const os = require('os');
const { EventEmitter } = require('events');
const { mapError, isStale, isFatal, isTransient, RetryError, NotInstalledError } = require('./errors');
const { toInterval, makePool, cancelActive, detectFeatures, sleep, destroySocket, within } = require('./util');

const immediate = () => new Promise((resolve) => setImmediate(resolve));
const MAX_ERROR_TEXT = 8000;
// Backoff of a claim loop after an error that a retry may fix (ms).
const BACKOFF_FIRST = 500;
const BACKOFF_MAX = 30000;
// A completion or failure that meets a transient error (a dropped
// connection, a restart, a read-only standby) is tried again this many
// times in all, with the same token: a stale answer then means another
// worker has the item, and the outcome is dropped.
const OUTCOME_TRIES = 4;
const OUTCOME_BACKOFF_FIRST = 200;
// How often the plain-mode heartbeat looks for jobs due (ms).
const BEAT_TICK_MS = 100;

/** host:pid, recorded as the claims' worker unless `worker` names one. */
function defaultWorkerName() {
  return `${os.hostname()}:${process.pid}`;
}

/** "Name: message" of a handler's failure, on one line. */
function failureText(err) {
  if (!(err instanceof Error)) return String(err).split('\n')[0];
  const first = (err.message || '').split('\n')[0];
  return first ? `${err.name || 'Error'}: ${first}` : (err.name || 'Error');
}

const defaultLogger = {
  info() {},
  warn: (...args) => console.warn('[pg-claim]', ...args),
  error: (...args) => console.error('[pg-claim]', ...args),
};

function errorText(err) {
  let text;
  if (err instanceof Error) text = err.message || err.name;
  else text = String(err);
  return text.length > MAX_ERROR_TEXT ? text.slice(0, MAX_ERROR_TEXT) : text;
}

/** What a handler threw when it was not an Error (undefined, null, 0, '', a string). */
class HandlerThrewError extends Error {
  constructor(value) {
    let shown;
    try {
      shown = typeof value === 'string' ? JSON.stringify(value) : String(value);
    } catch (e) {
      shown = typeof value;
    }
    super(`the handler threw a non-Error value: ${shown}`);
    this.name = 'HandlerThrewError';
    this.value = value;
  }
}

/** Marks a pooled client as having the worker's one 'error' listener. */
const HAS_ERROR_LISTENER = Symbol('pg-claim error listener');
function quietErrors(client) {
  if (!client[HAS_ERROR_LISTENER]) {
    client[HAS_ERROR_LISTENER] = true;
    client.on('error', () => {});
  }
  return client;
}

/** Backoff with jitter: a random delay between half of `ms` and `ms`. */
function jitter(ms) {
  return Math.round(ms / 2 + Math.random() * (ms / 2));
}

/**
 * Milliseconds of a duration given as a number (ms) or an interval string
 * ('5 s', '500 ms'). An interval not parsed here: a generous deadline (an
 * hour), or with `what`, a TypeError.
 */
function intervalMs(value, what) {
  if (typeof value === 'number') return value;
  const m = /^\s*([0-9.]+)\s*(ms|msec|milliseconds?|s|sec|secs|seconds?|min|mins|minutes?|h|hours?)?\s*$/i.exec(String(value));
  if (!m) {
    if (what) throw new TypeError(`Worker: ${what}: '${value}' is not a duration ('30 s', '500 ms', '2 min')`);
    return 3600000;
  }
  const n = Number(m[1]);
  const unit = (m[2] || 's').toLowerCase();
  if (unit === 'ms' || unit === 'msec' || unit.startsWith('milli')) return n;
  if (unit.startsWith('min')) return n * 60000;
  if (unit.startsWith('h')) return n * 3600000;
  return n * 1000;
}

function jsonOrNull(value) {
  if (value === undefined || value === null) return null;
  return JSON.stringify(value);
}

/**
 * Claims items of one queue and runs a handler on each, up to `concurrency`
 * at once. See README.md for the options and the guarantees.
 */
class Worker extends EventEmitter {
  constructor(options) {
    super();
    if (!options || typeof options !== 'object') throw new TypeError('Worker: options are required');
    const { queue, handler } = options;
    if (typeof queue !== 'string' || queue === '') throw new TypeError('Worker: queue must be a non-empty string');
    if (typeof handler !== 'function') throw new TypeError('Worker: handler must be a function');
    const concurrency = options.concurrency === undefined ? 1 : options.concurrency;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 10000) {
      throw new TypeError('Worker: concurrency must be an integer from 1 to 10000');
    }
    this.queue = queue;
    this.handler = handler;
    this.concurrency = concurrency;
    this.transactional = !!options.transactional;
    // Durations: an interval string ('30 s', '500 ms': the same in every
    // client), or a number of milliseconds under a name that says so
    // (leaseMs). A plain number under the short name (lease: 30000) is
    // milliseconds too, as before, but Python reads lease=30 as seconds:
    // run() warns once about each (clients/OPTIONS.md).
    this._plainNumbers = [];
    const duration = (name) => {
      const msName = `${name}Ms`;
      if (options[msName] !== undefined) {
        if (options[name] !== undefined) throw new TypeError(`Worker: give ${name} or ${msName}, not both`);
        const v = options[msName];
        if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
          throw new TypeError(`Worker: ${msName} must be a number of milliseconds >= 0`);
        }
        return v;
      }
      if (typeof options[name] === 'number') this._plainNumbers.push(name);
      return options[name];
    };
    const lease = duration('lease');
    const wait = duration('wait');
    const grace = duration('grace');
    const callTimeout = duration('callTimeout');
    this.lease = toInterval(lease, 'lease');
    this.wait = toInterval(wait === undefined ? 5000 : wait, 'wait');
    this.grace = grace === undefined ? 30000 : (typeof grace === 'string' ? intervalMs(grace, 'grace') : grace);
    if (typeof this.grace !== 'number' || !(this.grace >= 0)) {
      throw new TypeError("Worker: grace must be milliseconds >= 0 (graceMs) or an interval ('30 s')");
    }
    this.heartbeat = options.heartbeat === undefined ? true : !!options.heartbeat;
    // The longest any statement of the worker's own may take (a claim: its
    // wait and this), connecting included: a connection that stopped
    // answering without closing (a half-open TCP connection) fails the call
    // instead of hanging the worker. Milliseconds.
    this.callTimeout = callTimeout === undefined ? 30000
      : (typeof callTimeout === 'string' ? intervalMs(callTimeout, 'callTimeout') : callTimeout);
    if (typeof this.callTimeout !== 'number' || !(this.callTimeout > 0)) {
      throw new TypeError("Worker: callTimeout must be milliseconds > 0 (callTimeoutMs) or an interval ('30 s')");
    }
    this._waitMs = intervalMs(this.wait);
    this.workerName = options.worker || defaultWorkerName();
    this.logger = Object.assign({}, defaultLogger, options.logger || {});
    this._options = options;
    this._signal = options.signal || null;
    this._pool = null;
    this._ownsPool = false;
    this._features = null;
    const lanes = options.lanes === undefined ? 1 : options.lanes;
    if (!Number.isInteger(lanes) || lanes < 1 || lanes > concurrency) {
      throw new TypeError('Worker: lanes must be an integer from 1 to concurrency');
    }
    this.lanes = lanes;
    if (options.piggyback !== undefined && typeof options.piggyback !== 'boolean') {
      throw new TypeError('Worker: piggyback must be true or false');
    }
    /** Whether claims carry completions (claim_next(done => ...)); known once run() started. */
    this.piggyback = false;
    this._lanes = []; // per claim loop: { client, state: idle | claiming | backoff | done }
    this._reserved = 0; // slots asked for by claims in flight
    this._state = 'new'; // new | running | draining | stopped
    this._stopping = false;
    this._stopRequestedAt = 0;
    this._active = 0; // handlers running (slots in use)
    this._jobs = new Set(); // jobs not yet settled (handler or completion pending)
    this._pendingDone = []; // finished jobs whose completion rides on the next claim
    this._batch = []; // finished jobs to complete together in one statement
    this._batchScheduled = false;
    this._completions = new Set(); // completion promises in flight
    this._waiters = new Set(); // claim loops waiting for a slot or sleeping
    this._cancels = new Set(); // cancel requests of stop() still on their way
    this._conns = new Set(); // connections of the worker's own pool (closed at the end, whatever their state)
    this._runPromise = null;
    this._fatal = null; // the error that stopped the worker, rejected by run()
    this._beating = new Set(); // plain-mode jobs that the worker's heartbeat extends
    this._beatTimer = null;
    this._beatInFlight = false;
    this.stats = {
      claimed: 0, completed: 0, failed: 0, stale: 0, released: 0, claimCalls: 0, extended: 0, extendCalls: 0,
    };
  }

  /** Claims and runs items until stop() or the signal; resolves when all is given back. */
  run() {
    if (this._runPromise) return this._runPromise;
    this._runPromise = this._run();
    return this._runPromise;
  }

  /** Stops claiming, lets running handlers finish up to `grace`, releases the rest. */
  stop() {
    if (!this._stopping) {
      this._stopping = true;
      this._stopRequestedAt = Date.now();
      this._kick();
      for (const lane of this._lanes) {
        if (lane.state === 'claiming' && lane.client) {
          const { client } = lane;
          const sent = cancelActive(client, this._shortMs()).catch(() => {});
          this._cancels.add(sent);
          sent.then(() => {
            this._cancels.delete(sent);
            // A claim that the cancel did not end (the connection stopped
            // answering, or the cancel went astray) is not waited for: its
            // connection is closed, and the server rolls the claim back.
            const timer = setTimeout(() => {
              if (lane.client === client && lane.state === 'claiming') destroySocket(client);
            }, this._shortMs());
            if (timer.unref) timer.unref();
          });
        }
      }
    }
    return this._runPromise || Promise.resolve();
  }

  /**
   * How long stop() waits for one step of its own (a cancel request to be
   * answered, a cancelled claim to return, the pool to close): at most 5 s,
   * and less with a shorter callTimeout.
   */
  _shortMs() {
    return Math.min(5000, this.callTimeout);
  }

  /**
   * When stop() gives up on outcomes still being written: the grace period,
   * then one callTimeout. Whatever is not written by then is redelivered
   * after its lease. So stop() resolves within grace + callTimeout + 2 ×
   * _shortMs(), whatever the connections do.
   */
  _hardDeadline() {
    return (this._stopRequestedAt || Date.now()) + this.grace + this.callTimeout;
  }

  /** The pg.Pool the worker uses (given or its own); set once run() started. */
  get pool() {
    return this._pool;
  }

  get running() {
    return this._runPromise !== null && this._state !== 'stopped';
  }

  async _run() {
    for (const name of this._plainNumbers) {
      this.logger.warn(`Worker: ${name}: ${this._options[name]} is read as milliseconds (Python reads ` +
        `a plain number as seconds): name the unit, ${name}Ms: ${this._options[name]}, or give an interval, ` +
        `${name}: '${this._options[name] / 1000} s'`);
    }
    const onAbort = () => this.stop();
    if (this._signal) {
      if (this._signal.aborted) this._stopping = true;
      else this._signal.addEventListener('abort', onAbort, { once: true });
    }
    const { pool, owned } = makePool({
      ...this._options,
      poolConfig: { connectionTimeoutMillis: this.callTimeout, ...(this._options.poolConfig || {}) },
    }, this._poolSize());
    if (!owned) this._checkPool(pool);
    if (owned) {
      pool.on('connect', (c) => this._conns.add(c));
      pool.on('remove', (c) => this._conns.delete(c));
    }
    this._pool = pool;
    this._ownsPool = owned;
    try {
      try {
        const { rows } = await pool.query("SELECT pg_catalog.to_regnamespace('claim') IS NOT NULL AS installed");
        if (!rows[0].installed) {
          throw new NotInstalledError('the database has no schema claim: run CREATE EXTENSION pg_claim in it', '3F000');
        }
        this._features = await detectFeatures(pool);
      } catch (err) {
        throw mapError(err);
      }
      // Completing on the claim (claim_next(done => ...)) saves a statement
      // per batch, but the claim then waits for the completions' commit and
      // runs them on the claim's own backend. Completing on another
      // connection overlaps the next claim, lets concurrent completions share
      // WAL flushes, and measured as fast or faster; so it is the default.
      this.piggyback = this._features.done && this._options.piggyback === true;
      this._features.done = this.piggyback;
      this._state = 'running';
      if (!this._stopping) {
        for (let i = 0; i < this.lanes; i += 1) this._lanes.push({ client: null, state: 'idle' });
        await Promise.all(this._lanes.map((lane) => this._dispatch(lane)));
      }
      this._state = 'draining';
      await this._drain();
    } finally {
      this._state = 'stopped';
      if (this._signal) this._signal.removeEventListener('abort', onAbort);
      // A connection closes only after the cancel requests sent to it are
      // answered (each gives up after 5 s): a pooler that sees the client
      // leave while its cancel request is still open may drop the wrong
      // connection, and PgBouncer 1.18 exits.
      if (this._cancels.size) await within(Promise.all([...this._cancels]), this._shortMs());
      for (const lane of this._lanes) {
        // Closed rather than pooled: the server may still act on a cancel.
        if (lane.client) this._discard(lane.client);
        lane.client = null;
      }
      // A pool whose connections stopped answering must not hold stop() up,
      // nor keep the process alive afterwards.
      if (this._ownsPool) {
        await within(pool.end().catch(() => {}), this._shortMs());
        for (const c of this._conns) destroySocket(c);
        this._conns.clear();
      }
      this.emit('stopped');
    }
    if (this._fatal) throw this._fatal;
    return this.stats;
  }

  /**
   * Connections the worker may use at once: one per claim loop, one per
   * running transactional job, and in plain mode a few for completions,
   * failures and heartbeats (pg.Pool queues the rest), one for stop().
   */
  _poolSize() {
    const perJob = this.transactional ? this.concurrency : Math.min(this.concurrency, 8);
    return this.lanes + perJob + 1;
  }

  _checkPool(pool) {
    const max = pool && pool.options && pool.options.max;
    if (this.transactional && typeof max === 'number' && max < this.lanes + this.concurrency) {
      throw new TypeError(`Worker: the pool given has max ${max} connections; transactional mode with ` +
        `concurrency ${this.concurrency} and lanes ${this.lanes} needs at least ${this.lanes + this.concurrency}`);
    }
  }

  /** A statement of the worker's own, with its deadline (callTimeout, plus `extraMs`). */
  _q(on, text, values, extraMs = 0) {
    return on.query({ text, values, query_timeout: this.callTimeout + extraMs });
  }

  /** Takes a checked-out client out of the pool and closes its socket at once. */
  _discard(client) {
    try {
      client.release(true);
    } catch (e) {
      // released already
    }
    destroySocket(client);
  }

  _kick() {
    const waiters = [...this._waiters];
    this._waiters.clear();
    for (const wake of waiters) wake();
  }

  /** Sleeps until _kick() (a slot freed, stop()) or `ms` passed (no limit when undefined). */
  _pause(ms) {
    return new Promise((resolve) => {
      let timer = null;
      const wake = () => {
        if (timer) clearTimeout(timer);
        this._waiters.delete(wake);
        resolve();
      };
      if (ms !== undefined) timer = setTimeout(wake, ms);
      this._waiters.add(wake);
    });
  }

  /** True when a claim loop is about to claim, so a finished item can ride on it. */
  _laneAboutToClaim() {
    return this._lanes.some((lane) => lane.state === 'idle');
  }

  // --- the claim loops ------------------------------------------------------
  //
  // `lanes` loops claim concurrently, each on its own connection and each for
  // at most its share of the slots, so that one loop's statement (and its
  // commit) overlaps the next one's.

  async _dispatch(lane) {
    let backoff = BACKOFF_FIRST;
    const share = Math.ceil(this.concurrency / this.lanes);
    while (!this._stopping) {
      if (this._active + this._reserved >= this.concurrency) {
        lane.state = 'idle';
        await this._pause();
        continue;
      }
      // Let handlers that are about to finish do so, so that their tokens
      // ride on this claim.
      lane.state = 'idle';
      await immediate();
      if (this._stopping) break;
      const n = Math.min(share, this.concurrency - this._active - this._reserved);
      if (n <= 0) continue;
      const done = this._features.done ? this._pendingDone.splice(0) : [];
      lane.state = 'claiming';
      this._reserved += n;
      let rows;
      try {
        if (!lane.client) {
          lane.client = quietErrors(await this._pool.connect());
        }
        if (this._stopping) {
          // stop() came while connecting: its cancel found nothing to cancel.
          this._reserved -= n;
          if (done.length) this._completeEach(done);
          break;
        }
        const started = Date.now();
        rows = await this._claim(lane.client, n, done);
        this._reserved -= n;
        backoff = BACKOFF_FIRST;
        if (rows.length === 0 && done.length === 0 && Date.now() - started < 20 && !this._stopping) {
          // The claim did not wait (wait => 0): do not spin on an empty queue.
          lane.state = 'backoff';
          await this._pause(100);
        }
      } catch (err) {
        this._reserved -= n;
        lane.state = 'backoff';
        if (done.length) {
          // Nothing was completed or claimed: complete one by one, which
          // sorts the stale tokens from the live ones.
          this._completeEach(done);
          if (isStale(err)) continue;
        }
        const stoppingCancel = this._stopping && err && err.code === '57014';
        if (!stoppingCancel && isFatal(err)) {
          // Nothing will change by trying again: stop, and reject run().
          if (!this._fatal) {
            this._fatal = mapError(err);
            this.logger.error(`worker ${this.workerName}: ${errorText(err)}; stopping`);
          }
          this.stop();
          break;
        }
        if (!stoppingCancel && !this._stopping) {
          this.logger.warn(`worker ${this.workerName}: claim on queue ${this.queue} failed: ${errorText(err)}` +
            `${err && err.code ? ` (${err.code})` : ''}; retrying in ${backoff} ms`);
        }
        if (lane.client && !(err && typeof err.code === 'string' && err.code.length === 5)) {
          // Not a server error: the connection may be gone; take a new one.
          this._discard(lane.client);
          lane.client = null;
        }
        if (this._stopping) break;
        await this._pause(jitter(backoff));
        backoff = Math.min(backoff * 2, BACKOFF_MAX);
        continue;
      }
      lane.state = 'idle';
      for (const state of done) this._settled(state, 'completed');
      if (this._stopping) {
        // Claimed after stop() was called: give them back unstarted.
        for (const row of rows) this._releaseUnstarted(row);
        break;
      }
      for (const row of rows) this._start(row);
    }
    lane.state = 'done';
  }

  async _claim(client, n, done) {
    // A claim that completes tokens does not wait: its completions commit
    // when the statement ends, and an empty queue must not hold them back.
    const params = [this.queue, n, this.lease, done.length ? '0' : this.wait, this.workerName];
    let call = 'claim.claim_next(queue => $1::text, n => $2::int, lease => $3::interval, wait => $4::interval, worker => $5::text';
    if (done.length) {
      params.push(done.map((state) => state.job.token));
      call += ', done => $6::bigint[]';
    }
    call += ')';
    this.stats.claimCalls += 1;
    // Tokens come back as text: a decimal string end to end, whatever int8
    // parser the pool has (setTypeParser(20, parseInt) cannot round one).
    const sql = 'SELECT id, token::text AS token, payload, attempt, group_key, enqueued_at, lease_until, ' +
      '(EXTRACT(EPOCH FROM lease_until - pg_catalog.clock_timestamp()) * 1000)::float8 AS lease_ms ' +
      `FROM ${call}`;
    try {
      const { rows } = await this._q(client, sql, params, done.length ? 0 : this._waitMs);
      return rows;
    } catch (err) {
      throw mapError(err);
    }
  }

  _releaseUnstarted(row) {
    const p = this._q(this._pool, 'SELECT claim.release($1::bigint)', [row.token]).then(
      () => { this.stats.released += 1; },
      (err) => this.logger.warn(`release of item ${row.id} failed: ${errorText(err)}`),
    );
    this._track(p);
  }

  // --- one job --------------------------------------------------------------

  _start(row) {
    this.stats.claimed += 1;
    const controller = new AbortController();
    const job = {
      queue: this.queue,
      id: row.id,
      token: row.token,
      payload: row.payload,
      attempt: row.attempt,
      groupKey: row.group_key,
      enqueuedAt: row.enqueued_at,
      leaseUntil: row.lease_until,
    };
    const state = {
      job,
      controller,
      lost: false,
      abandoned: false,
      finished: false,
      heartbeatTimer: null,
      extending: false,
      client: null,
      clientGone: false,
      leaseMs: Math.max(row.lease_ms || 0, 0),
    };
    job.token = String(job.token);
    this._active += 1;
    this._jobs.add(state);
    if (this.heartbeat) this._startHeartbeat(state);
    const ctx = {
      signal: controller.signal,
      worker: this,
      client: null,
      extend: (lease) => this._extend(state, lease),
    };
    const run = this.transactional ? this._runTransactional(state, ctx) : this._runPlain(state, ctx);
    run.catch((err) => this.logger.error(`internal error on item ${job.id}: ${errorText(err)}`));
  }

  _handlerDone(state) {
    if (state.handlerDone) return;
    state.handlerDone = true;
    this._stopHeartbeat(state);
    this._active -= 1;
    this._kick();
  }

  async _runPlain(state, ctx) {
    let result;
    let error = null;
    let threw = false;
    try {
      result = await this.handler(state.job, ctx);
    } catch (err) {
      // Whatever was thrown (undefined, null, 0, '' included) is a failure.
      threw = true;
      error = err instanceof Error ? err : new HandlerThrewError(err);
    }
    this._handlerDone(state);
    if (state.abandoned) return; // released at the end of the grace period
    if (state.lost) {
      this._dropStale(state, 'the handler finished after its lease was lost');
      return;
    }
    if (threw) {
      await this._fail(state, error, this._pool);
      return;
    }
    let json;
    try {
      json = jsonOrNull(result);
    } catch (err) {
      // A result that cannot be stored (a BigInt, a cycle): fail the item
      // rather than leave it neither completed nor failed.
      await this._fail(state, new TypeError(`the handler's result cannot be stored as JSON: ${errorText(err)}`), this._pool);
      return;
    }
    this._complete(state, result, json);
  }

  async _runTransactional(state, ctx) {
    const { job } = state;
    let client;
    try {
      client = await this._pool.connect();
    } catch (err) {
      this._handlerDone(state);
      this.logger.error(`item ${job.id}: no connection (${errorText(err)}); it is redelivered after its lease`);
      this._settled(state, 'dropped');
      return;
    }
    quietErrors(client);
    state.client = client;
    ctx.client = client;
    let phase = 'begin';
    let result;
    try {
      if (state.abandoned) throw new Error('abandoned');
      await this._q(client, 'BEGIN');
      phase = 'assert';
      await this._q(client, 'SELECT claim.assert_token($1::bigint)', [job.token]);
      // From here on the lease is extended inside this transaction (state.inTx):
      // from another connection, extend would wait for the lock that
      // assert_token holds. The heartbeat's queries queue on this client
      // between the handler's statements.
      state.inTx = true;
      phase = 'handler';
      try {
        result = await this.handler(job, ctx);
      } catch (err) {
        throw err instanceof Error ? err : new HandlerThrewError(err);
      }
      this._handlerDone(state);
      if (state.abandoned) throw new Error('abandoned');
      phase = 'complete';
      let json;
      try {
        json = jsonOrNull(result);
      } catch (err) {
        phase = 'handler';
        throw new TypeError(`the handler's result cannot be stored as JSON: ${errorText(err)}`);
      }
      await this._completeOn(client, job.token, result, json);
      phase = 'commit';
      state.inTx = false;
      await this._q(client, 'COMMIT');
      this._releaseClient(state, false);
      this._settled(state, 'completed', result);
    } catch (err) {
      state.inTx = false;
      this._handlerDone(state);
      const usable = !state.clientGone;
      if (usable) {
        try {
          await this._q(client, 'ROLLBACK');
        } catch (e) {
          this._releaseClient(state, true);
        }
      }
      if (state.abandoned) {
        this._releaseClient(state, true);
        return;
      }
      const mapped = phase === 'handler' ? err : mapError(err);
      if (phase !== 'handler' && isStale(mapped)) {
        this._releaseClient(state, !usable);
        this._dropStale(state, phase === 'assert' ? 'the claim was lost before the handler ran' : 'the claim was lost', mapped);
        return;
      }
      if (phase === 'begin' || (phase === 'assert' && !(mapped && mapped.code))) {
        this._releaseClient(state, true);
        this.logger.error(`item ${job.id}: ${errorText(err)}; it is redelivered after its lease`);
        this._settled(state, 'dropped');
        return;
      }
      // The handler (or its commit) failed: nothing it wrote is kept.
      const on = state.clientGone ? this._pool : client;
      await this._fail(state, err, on);
      this._releaseClient(state, false);
    }
  }

  _releaseClient(state, destroy) {
    if (state.client && !state.clientGone) {
      state.clientGone = true;
      if (destroy) this._discard(state.client);
      else state.client.release();
    }
  }

  // --- heartbeat ------------------------------------------------------------

  _startHeartbeat(state) {
    const third = state.leaseMs / 3;
    if (!this.transactional) {
      // Plain mode: one heartbeat for the whole worker, which extends every
      // job that is due (or due within a sixth of its lease) in one
      // statement; see _beat().
      state.beatEvery = Math.max(third, 50);
      state.nextBeatAt = Date.now() + state.beatEvery;
      this._beating.add(state);
      if (!this._beatTimer) {
        this._beatTimer = setInterval(() => this._beat(), BEAT_TICK_MS);
        if (this._beatTimer.unref) this._beatTimer.unref();
      }
      return;
    }
    // Transactional mode: each job's lease is extended inside its own
    // transaction, on its own timer: a third of the lease, less up to a
    // tenth at random, so that jobs claimed together do not all extend at
    // the same instant.
    const every = Math.max(Math.floor(third - Math.random() * third * 0.3), 50);
    state.heartbeatTimer = setInterval(() => {
      if (state.extending || state.finished || state.lost || state.handlerDone) return;
      this._extend(state, this.lease).catch(() => {});
    }, every);
    if (state.heartbeatTimer.unref) state.heartbeatTimer.unref();
  }

  _stopHeartbeat(state) {
    if (state.heartbeatTimer) {
      clearInterval(state.heartbeatTimer);
      state.heartbeatTimer = null;
    }
    if (this._beating.delete(state) && this._beating.size === 0 && this._beatTimer) {
      clearInterval(this._beatTimer);
      this._beatTimer = null;
    }
  }

  /**
   * The plain-mode heartbeat: the jobs whose extension is due, with those
   * due within a sixth of their lease, extended together in one statement
   * (claim.extend per token, in one transaction). A stale token refuses
   * the statement: the jobs are then extended one by one, which tells the
   * lost lease apart. One job due: claim.extend alone.
   */
  _beat() {
    if (this._beatInFlight) return;
    const now = Date.now();
    const due = [];
    let anyDue = false;
    for (const state of this._beating) {
      if (state.extending || state.finished || state.lost || state.handlerDone) continue;
      if (state.nextBeatAt <= now) anyDue = true;
      if (state.nextBeatAt - state.beatEvery / 2 <= now) due.push(state);
    }
    if (!anyDue) return;
    for (const state of due) state.nextBeatAt = now + state.beatEvery;
    if (due.length === 1) {
      this._extend(due[0], this.lease).catch(() => {});
      return;
    }
    this._beatInFlight = true;
    for (const state of due) state.extending = true;
    this.stats.extendCalls += 1;
    const sql = 'SELECT t::text AS token, claim.extend(t, $2::interval) AS lease_until ' +
      'FROM pg_catalog.unnest($1::bigint[]) AS t';
    this._q(this._pool, sql, [due.map((st) => st.job.token), toInterval(this.lease, 'lease')]).then(
      ({ rows }) => {
        const byToken = new Map(rows.map((r) => [r.token, r.lease_until]));
        for (const state of due) {
          state.extending = false;
          if (byToken.has(state.job.token)) {
            state.job.leaseUntil = byToken.get(state.job.token);
            this.stats.extended += 1;
          }
        }
      },
      (err) => {
        for (const state of due) state.extending = false;
        if (isStale(mapError(err))) {
          for (const state of due) this._extend(state, this.lease).catch(() => {});
        } else {
          this.logger.warn(`heartbeat of ${due.length} jobs failed: ${errorText(err)}; trying again`);
          for (const state of due) state.nextBeatAt = Date.now() + Math.min(state.beatEvery, 1000);
        }
      },
    ).finally(() => { this._beatInFlight = false; });
  }

  async _extend(state, lease) {
    state.extending = true;
    // In transactional mode, inside the handler's transaction (see _runTransactional).
    const on = state.inTx && state.client && !state.clientGone ? state.client : this._pool;
    this.stats.extendCalls += 1;
    try {
      const { rows } = await this._q(on, 'SELECT claim.extend($1::bigint, $2::interval) AS lease_until',
        [state.job.token, toInterval(lease, 'lease')]);
      state.job.leaseUntil = rows[0].lease_until;
      this.stats.extended += 1;
      return rows[0].lease_until;
    } catch (err) {
      const mapped = mapError(err);
      if (isStale(mapped) && !state.finished && !state.handlerDone) {
        state.lost = true;
        this._stopHeartbeat(state);
        state.controller.abort(mapped);
      } else if (!state.finished && !isStale(mapped)) {
        this.logger.warn(`heartbeat of item ${state.job.id} failed: ${errorText(err)}`);
      }
      throw mapped;
    } finally {
      state.extending = false;
    }
  }

  // --- outcomes -------------------------------------------------------------

  _completeOn(queryable, token, result, json = jsonOrNull(result)) {
    if (json !== null && this._features.result) {
      return this._q(queryable, 'SELECT claim.complete($1::bigint, $2::jsonb)', [token, json]);
    }
    return this._q(queryable, 'SELECT claim.complete($1::bigint)', [token]);
  }

  _complete(state, result, json) {
    if (json !== null && this._features.result) {
      this._track(this._withRetry(() => this._completeOn(this._pool, state.job.token, result, json)).then(
        () => this._settled(state, 'completed', result),
        (err) => this._completionFailed(state, err),
      ));
      return;
    }
    if (this._features.done && !this._stopping && this._laneAboutToClaim()) {
      // The claim loop is about to claim: the completion rides on it.
      state.result = result;
      this._pendingDone.push(state);
      return;
    }
    state.result = result;
    this._batch.push(state);
    if (!this._batchScheduled) {
      this._batchScheduled = true;
      setImmediate(() => this._flushBatch());
    }
  }

  _flushBatch() {
    this._batchScheduled = false;
    const batch = this._batch.splice(0);
    if (batch.length === 0) return;
    if (batch.length === 1) {
      this._completeEach(batch);
      return;
    }
    this._track(this._q(this._pool, 'SELECT claim.complete_many($1::bigint[])', [batch.map((s) => s.job.token)]).then(
      () => { for (const s of batch) this._settled(s, 'completed'); },
      (err) => {
        // One stale token refuses the whole batch: complete one by one.
        if (!isStale(mapError(err))) this.logger.warn(`batch completion failed: ${errorText(err)}; completing one by one`);
        this._completeEach(batch);
      },
    ));
  }

  /** Runs `send` again (up to OUTCOME_TRIES in all) while it fails with a transient error. */
  async _withRetry(send) {
    let delay = OUTCOME_BACKOFF_FIRST;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await send();
      } catch (err) {
        if (attempt >= OUTCOME_TRIES || !(isTransient(err) || (err && err.code === '57014'))) throw err;
        const pause = jitter(delay);
        // After stop(), no retry past the deadline of the outcomes.
        if (this._stopping && Date.now() + pause + this.callTimeout > this._hardDeadline()) throw err;
        await sleep(pause);
        delay *= 2;
      }
    }
  }

  _completeEach(states) {
    for (const state of states) {
      this._track(this._withRetry(() => this._q(this._pool, 'SELECT claim.complete($1::bigint)', [state.job.token])).then(
        () => this._settled(state, 'completed'),
        (err) => this._completionFailed(state, err),
      ));
    }
  }

  _completionFailed(state, err) {
    const mapped = mapError(err);
    if (isStale(mapped)) {
      this._dropStale(state, 'completion refused', mapped);
    } else {
      this.logger.error(`completion of item ${state.job.id} failed: ${errorText(err)}; it is redelivered after its lease`);
      this._settled(state, 'dropped');
    }
  }

  async _fail(state, error, queryable) {
    const retryIn = error instanceof RetryError ? toInterval(error.afterMs, 'afterMs') : null;
    const { job } = state;
    if (retryIn === null) {
      this.logger.warn(`worker ${this.workerName}: job ${job.id} attempt ${job.attempt} failed: ${failureText(error)}`);
    } else {
      this.logger.info(`worker ${this.workerName}: job ${job.id} attempt ${job.attempt}: retry in ${error.afterMs} ms`);
    }
    try {
      const send = () => this._q(queryable, 'SELECT claim.fail($1::bigint, $2::text, $3::interval)',
        [state.job.token, errorText(error), retryIn]);
      if (queryable === this._pool) await this._withRetry(send);
      else await send();
      this.stats.failed += 1;
      this._settled(state, 'failed', error);
    } catch (err) {
      const mapped = mapError(err);
      if (isStale(mapped)) this._dropStale(state, 'failure refused', mapped);
      else {
        this.logger.error(`fail() of item ${state.job.id} failed: ${errorText(err)}; it is redelivered after its lease`);
        this._settled(state, 'dropped');
      }
    }
  }

  _dropStale(state, why, err) {
    this.stats.stale += 1;
    this.logger.warn(`worker ${this.workerName}: job ${state.job.id} attempt ${state.job.attempt}: stale token ${state.job.token}, outcome dropped: ${why}`);
    this._settled(state, 'stale', err);
  }

  _settled(state, outcome, detail) {
    if (state.finished) return;
    state.finished = true;
    this._stopHeartbeat(state);
    this._jobs.delete(state);
    if (outcome === 'completed') this.stats.completed += 1;
    try {
      this.emit(outcome, state.job, detail);
      this.emit('settled', state.job, outcome);
    } catch (err) {
      this.logger.error(`a '${outcome}' listener threw: ${errorText(err)}`);
    }
    if (this._jobs.size === 0 && this._onIdle) this._onIdle();
  }

  _track(promise) {
    this._completions.add(promise);
    const forget = () => this._completions.delete(promise);
    promise.then(forget, (err) => {
      forget();
      this.logger.error(`internal error: ${errorText(err)}`);
    });
    return promise;
  }

  // --- stopping -------------------------------------------------------------

  async _drain() {
    const deadline = (this._stopRequestedAt || Date.now()) + this.grace;
    if (this._pendingDone.length) this._completeEach(this._pendingDone.splice(0));
    if (this._jobs.size > 0) {
      const idle = new Promise((resolve) => { this._onIdle = resolve; });
      const remaining = deadline - Date.now();
      if (remaining > 0) {
        let timer;
        await Promise.race([idle, new Promise((resolve) => { timer = setTimeout(resolve, remaining); })]);
        clearTimeout(timer);
      }
      this._onIdle = null;
    }
    // Whatever is still held after the grace period goes back to the queue.
    const releases = [];
    for (const state of [...this._jobs]) {
      if (state.handlerDone) continue; // its outcome is being written
      releases.push(this._abandon(state));
    }
    const hard = this._hardDeadline();
    await within(Promise.all(releases), hard - Date.now());
    if (this._batch.length) this._flushBatch();
    if (this._pendingDone.length) this._completeEach(this._pendingDone.splice(0));
    while (this._completions.size && Date.now() < hard) {
      await within(Promise.allSettled([...this._completions]), hard - Date.now());
    }
    // What is still unwritten (the connections stopped answering) is
    // redelivered after its lease.
    for (const state of [...this._jobs]) {
      this.logger.error(`item ${state.job.id}: its outcome was not written before the stop deadline; ` +
        'it is redelivered after its lease');
      this._settled(state, 'dropped');
    }
    this._completions.clear();
  }

  async _abandon(state) {
    state.abandoned = true;
    this._stopHeartbeat(state);
    state.controller.abort(new Error('the worker stopped and its grace period ended'));
    if (state.client && !state.clientGone) {
      // Stop the transaction: cancel its statement, close its connection.
      await cancelActive(state.client, this._shortMs());
      this._releaseClient(state, true);
    }
    try {
      await this._q(this._pool, 'SELECT claim.release($1::bigint)', [state.job.token]);
      this.stats.released += 1;
      this._settled(state, 'released');
    } catch (err) {
      const mapped = mapError(err);
      if (!isStale(mapped)) this.logger.warn(`release of item ${state.job.id} failed: ${errorText(err)}`);
      this._settled(state, isStale(mapped) ? 'stale' : 'dropped', mapped);
    }
  }
}

/**
 * Stops the worker on SIGTERM and SIGINT (or the signals given). Returns a
 * function that removes the handlers again.
 */
function handleSignals(worker, signals = ['SIGTERM', 'SIGINT']) {
  const onSignal = (sig) => {
    worker.logger.info(`received ${sig}: stopping`);
    worker.stop();
  };
  for (const sig of signals) process.on(sig, onSignal);
  return () => {
    for (const sig of signals) process.removeListener(sig, onSignal);
  };
}

module.exports = { Worker, handleSignals, defaultWorkerName };
