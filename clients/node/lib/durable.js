'use strict';

/**
 * Durable runs on pg_claim's durable steps (docs/steps.md in the repository).
 *
 *   const order = durable(async (ctx) => {
 *     const paid = await ctx.transaction('charge', (client) => charge(client, ctx.id, ctx.payload));
 *     await ctx.sleep(3600 * 1000);                      // no worker waits
 *     const parcel = await ctx.step('ship', () => ship(ctx.payload, ctx.key('ship')));
 *     await ctx.step('email', () => mail(ctx.payload, parcel, ctx.key('email')));
 *     return { paid, parcel };
 *   });
 *   await order.run('orders', { connectionString });
 *
 * Each delivery runs the function from its start; a finished step returns its
 * recorded output instead of running again. Determinism rule: the function
 * makes the same ctx calls, in the same order, with the same names, on every
 * delivery; whatever can differ between deliveries goes inside a step.
 */
const pg = require('pg');
const { mapError, StaleTokenError, RetryError } = require('./errors');
const { toInterval } = require('./util');

const STALE = 'PC001';

/**
 * Thrown inside a durable function when its run is parked (a sleep, an event
 * not emitted yet, children not finished): the attempt ended without counting
 * and the run is delivered again later. The runner catches it; let it through.
 */
class Suspended extends Error {
  constructor(message) {
    super(message);
    this.name = 'Suspended';
  }
}

function jsonParam(value) {
  return JSON.stringify(value === undefined ? null : value);
}

async function inTransaction(client, fn) {
  await client.query('BEGIN');
  try {
    const value = await fn();
    await client.query('COMMIT');
    return value;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

/** What a durable function gets: the run's item and the durable calls. */
class Context {
  constructor(client, queue, row, lease) {
    this.client = client;
    this.queue = queue;
    this.id = row.id;           // bigint as a string
    this.token = row.token;     // bigint as a string
    this.payload = row.payload;
    this.attempt = row.attempt;
    this._lease = lease;
    this._sleeps = 0;
    this._children = 0;
  }

  /** An idempotency key for step `name` of this run, the same on every delivery. */
  key(name) {
    return `${this.queue}:${this.id}:${name}`;
  }

  async _recorded(name) {
    const r = await this.client.query(
      'SELECT s IS NOT NULL AS done, s AS output FROM claim.step($1::bigint, $2::text) AS s', [this.token, name]);
    return r.rows[0];
  }

  async _done(name, output) {
    await this.client.query('SELECT claim.step_done($1::bigint, $2::text, $3::jsonb)',
      [this.token, name, jsonParam(output)]);
  }

  /**
   * The recorded output of step `name`; else runs `fn()` (outside a
   * transaction), records what it resolves to (JSON) and returns it. At least
   * once: `fn` may run again if the worker dies before the record.
   */
  async step(name, fn) {
    const rec = await this._recorded(name);
    if (rec.done) return rec.output;
    await this.client.query('SELECT claim.extend($1::bigint, $2::interval)', [this.token, this._lease]);
    const out = await fn();
    await this._done(name, out);
    return out === undefined ? null : out;
  }

  /**
   * The recorded output of step `name`; else runs `fn(client)` in the
   * transaction that records it: its writes through `client` and the record
   * commit together, exactly once.
   */
  async transaction(name, fn) {
    return inTransaction(this.client, async () => {
      const rec = await this._recorded(name);
      if (rec.done) return rec.output;
      const out = await fn(this.client);
      await this._done(name, out);
      return out === undefined ? null : out;
    });
  }

  /**
   * Sleeps without holding a worker: `duration` milliseconds (or an interval
   * string) from the first time this sleep is reached, or until a Date. The
   * wake time is a step ('$sleep:N', or `name`): a replay does not sleep again.
   */
  async sleep(duration, name) {
    this._sleeps += 1;
    const step = name || `$sleep:${this._sleeps}`;
    const until = await inTransaction(this.client, async () => {
      const rec = await this._recorded(step);
      let at = rec.done ? rec.output : null;
      if (!rec.done) {
        const r = duration instanceof Date
          ? await this.client.query('SELECT $1::timestamptz AS t', [duration.toISOString()])
          : await this.client.query('SELECT pg_catalog.clock_timestamp() + $1::interval AS t',
            [toInterval(duration, 'duration')]);
        at = r.rows[0].t.toISOString();
        await this._done(step, at);
      }
      const due = await this.client.query('SELECT $1::timestamptz <= pg_catalog.clock_timestamp() AS due', [at]);
      if (due.rows[0].due) return null;
      await this.client.query('SELECT claim.sleep($1::bigint, $2::timestamptz)', [this.token, at]);
      return at;
    });
    if (until !== null) throw new Suspended(`sleeping until ${until}`);
  }

  /**
   * The payload of `event` (null for an event without one). Until it is
   * emitted the run is parked; after `timeout` without it the server's PC010
   * is raised here.
   */
  async awaitEvent(event, timeout = '1 day') {
    const r = await inTransaction(this.client, () => this.client.query(
      'SELECT e IS NOT NULL AS got, e AS payload FROM claim.await_event($1::bigint, $2::text, $3::interval) AS e',
      [this.token, event, toInterval(timeout, 'timeout')]));
    if (r.rows[0].got) return r.rows[0].payload;
    throw new Suspended(`waiting for event ${event}`);
  }

  /**
   * The results of the items `children` (completed, in a queue that retains
   * results), in the order given; until all completed, the run waits. The
   * results are recorded as a step ('$children:N').
   */
  async awaitChildren(children) {
    this._children += 1;
    const step = `$children:${this._children}`;
    const out = await inTransaction(this.client, async () => {
      const rec = await this._recorded(step);
      if (rec.done) return { done: true, results: rec.output };
      const r = await this.client.query(
        'SELECT r IS NOT NULL AS done, r AS results FROM claim.await_children($1::bigint, $2::bigint[]) AS r',
        [this.token, children.map(String)]);
      if (r.rows[0].done) await this._done(step, r.rows[0].results);
      return r.rows[0];
    });
    if (out.done) return out.results;
    throw new Suspended(`waiting for ${children.length} children`);
  }
}

/** A durable function and its runner (made by durable()). */
class Durable {
  constructor(fn) {
    this.fn = fn;
    this._stopped = false;
  }

  /** Ends run() after the delivery in progress (or the current wait). */
  stop() {
    this._stopped = true;
  }

  /**
   * Claims one run of `queue` (waiting up to opts.wait, default '10 s') on
   * `client` (a pg.Client outside a transaction) and runs it. Resolves to
   * null (nothing to claim), 'completed', 'suspended', 'failed' or 'stale'.
   */
  async runOne(client, queue, opts = {}) {
    const lease = toInterval(opts.lease, 'lease');
    const wait = toInterval(opts.wait === undefined ? '10 s' : opts.wait, 'wait');
    let rows;
    try {
      ({ rows } = await client.query(
        'SELECT id::text AS id, token::text AS token, payload, attempt FROM claim.claim_next($1::text, 1, $2::interval, $3::interval, $4::text)',
        [queue, lease, wait, opts.worker === undefined ? null : opts.worker]));
    } catch (err) {
      throw mapError(err);
    }
    if (rows.length === 0) return null;
    const ctx = new Context(client, queue, rows[0], lease);
    let result;
    try {
      result = await this.fn(ctx);
    } catch (err) {
      if (err instanceof Suspended) return 'suspended';
      if ((err && err.code === STALE) || err instanceof StaleTokenError) return 'stale';
      const retryIn = err instanceof RetryError ? toInterval(err.afterMs, 'afterMs') : null;
      return this._finish(client, 'SELECT claim.fail($1::bigint, $2::text, $3::interval)',
        [ctx.token, String((err && err.message) || err), retryIn], 'failed');
    }
    return this._finish(client, 'SELECT claim.complete($1::bigint, $2::jsonb)',
      [ctx.token, jsonParam(result)], 'completed');
  }

  async _finish(client, sql, params, outcome) {
    try {
      await client.query(sql, params);
      return outcome;
    } catch (err) {
      if (err && err.code === STALE) return 'stale';
      throw mapError(err);
    }
  }

  /**
   * Runs the items of `queue` one after another on a connection of its own
   * ({ connectionString } or $PG_CLAIM_DSN, else PG* variables) until stop()
   * or opts.maxRuns deliveries; resolves to how many deliveries it handled.
   */
  async run(queue, opts = {}) {
    const config = {};
    if (opts.connectionString) config.connectionString = opts.connectionString;
    else if (process.env.PG_CLAIM_DSN) config.connectionString = process.env.PG_CLAIM_DSN;
    const client = new pg.Client(config);
    client.on('error', () => {});
    await client.connect();
    let handled = 0;
    try {
      while (!this._stopped && (opts.maxRuns === undefined || handled < opts.maxRuns)) {
        if (await this.runOne(client, queue, opts) !== null) handled += 1;
      }
    } finally {
      await client.end();
    }
    return handled;
  }
}

/** Makes `fn(ctx)` a durable function: durable(fn).run(queue, opts). */
function durable(fn) {
  return new Durable(fn);
}

module.exports = { durable, Durable, DurableContext: Context, Suspended };
