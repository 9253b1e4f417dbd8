'use strict';

const { mapError, NotSupportedError, UnknownQueueError, InvalidArgumentError } = require('./errors');
const { toInterval, makePool } = require('./util');

/** A count of queue_stats: null (a standby that cannot know it) stays null. */
function count(value) {
  return value === null || value === undefined ? null : Number(value);
}

function jsonParam(value) {
  return JSON.stringify(value === undefined ? {} : value);
}

/**
 * Producer and operator helpers. Every method takes an optional `client`
 * (a pg.Client or PoolClient): the call then runs on it, inside whatever
 * transaction it has open, so an enqueue commits or rolls back with the
 * caller's own writes.
 */
class Client {
  constructor(options = {}) {
    const { pool, owned } = makePool(options);
    this.pool = pool;
    this._ownsPool = owned;
  }

  async _query(sql, params, opts, fn, older) {
    const on = (opts && opts.client) || this.pool;
    try {
      return await on.query(sql, params);
    } catch (err) {
      // A server before pg_claim 0.3.0 names the array forms as overloads.
      if (err && err.code === '42883' && older && !(opts && opts.client)) {
        return this._query(older, params, opts, fn);
      }
      if (err && err.code === '42883' && fn) {
        throw new NotSupportedError(`the server's pg_claim has no ${fn} of this form (${err.message})`, err);
      }
      throw mapError(err);
    }
  }

  /** Adds an item; resolves to its id (a string: ids are bigint). */
  async enqueue(queue, payload, opts = {}) {
    const params = [queue, jsonParam(payload), opts.groupKey === undefined ? null : opts.groupKey,
      opts.runAt === undefined ? null : opts.runAt, opts.priority === undefined ? 0 : opts.priority,
      opts.dedupKey === undefined ? null : opts.dedupKey];
    let call = 'claim.enqueue($1::text, $2::jsonb, $3::text, $4::timestamptz, $5::int, $6::text';
    if (opts.after !== undefined && opts.after !== null) {
      params.push(opts.after.map(String));
      call += ', after => $7::bigint[]';
    }
    if (opts.fairKey !== undefined && opts.fairKey !== null) {
      params.push(opts.fairKey);
      call += `, fair_key => $${params.length}::text`;
    }
    call += ')';
    const fn = opts.after ? 'enqueue(..., after)' : opts.fairKey ? 'enqueue(..., fair_key)' : null;
    const { rows } = await this._query(`SELECT ${call} AS id`, params, opts, fn);
    return rows[0].id;
  }

  /** Adds many items in one statement; resolves to their ids in order. */
  async enqueueBatch(queue, payloads, opts = {}) {
    if (!Array.isArray(payloads)) throw new TypeError('enqueueBatch: payloads must be an array');
    const params = [queue, payloads.map(jsonParam), opts.groupKeys === undefined ? null : opts.groupKeys,
      opts.runAt === undefined ? null : opts.runAt, opts.priority === undefined ? 0 : opts.priority];
    let named = '';
    if (opts.after !== undefined && opts.after !== null) {
      // Every item of the batch waits for these parents (docs/dependencies).
      params.push(opts.after.map(String));
      named += `, after => $${params.length}::bigint[]`;
    }
    if (opts.fairKey !== undefined && opts.fairKey !== null) {
      // Fair keys: enqueue_many of pg_claim 0.3.0 on (docs/fairness.md).
      params.push(opts.fairKey);
      named += `, fair_key => $${params.length}::text`;
    }
    if (named) {
      const { rows } = await this._query(
        `SELECT id FROM claim.enqueue_many($1::text, $2::jsonb[], $3::text[], $4::timestamptz, $5::int${named}) AS id`,
        params, opts, `enqueue_many(...${opts.after ? ', after' : ''}${opts.fairKey ? ', fair_key' : ''})`);
      return rows.map((r) => r.id);
    }
    const { rows } = await this._query(
      'SELECT id FROM claim.enqueue_many($1::text, $2::jsonb[], $3::text[], $4::timestamptz, $5::int) AS id',
      [queue, payloads.map(jsonParam), opts.groupKeys === undefined ? null : opts.groupKeys,
        opts.runAt === undefined ? null : opts.runAt, opts.priority === undefined ? 0 : opts.priority],
      opts, null,
      'SELECT id FROM claim.enqueue_batch($1::text, $2::jsonb[], $3::text[], $4::timestamptz, $5::int) AS id');
    return rows.map((r) => r.id);
  }

  /** Cancels items (live claims are revoked); resolves to how many. */
  async cancel(queue, ids, opts = {}) {
    const { rows } = await this._query('SELECT claim.cancel_many($1::text, $2::bigint[]) AS n',
      [queue, ids.map(String)], opts, 'claim.cancel_many', 'SELECT claim.cancel($1::text, $2::bigint[]) AS n');
    return rows[0].n;
  }

  /**
   * The state of an item: { state, attempt, result, error, finishedAt }, or
   * null when the queue holds no trace of it. With `wait`, waits inside the
   * server until the item is finished or the wait ends.
   */
  async itemState(queue, id, opts = {}) {
    const { rows } = await this._query(
      'SELECT state, attempt, result, error, finished_at FROM claim.item_state($1::text, $2::bigint, $3::interval)',
      [queue, String(id), toInterval(opts.wait === undefined ? 0 : opts.wait, 'wait')], opts, 'claim.item_state');
    const r = rows[0];
    if (!r || r.state === null) return null;
    return { state: r.state, attempt: r.attempt, result: r.result, error: r.error, finishedAt: r.finished_at };
  }

  /** Rows of claim.queue_stats (all queues, or one: UnknownQueueError when it does not exist). */
  async stats(queue, opts = {}) {
    const sql = 'SELECT * FROM claim.queue_stats' +
      (queue ? ' WHERE queue = $1::text' : '') + ' ORDER BY queue';
    const { rows } = await this._query(sql, queue ? [queue] : [], opts);
    if (queue && rows.length === 0) {
      throw new UnknownQueueError(`queue "${queue}" does not exist`, '42704');
    }
    return rows.map((r) => ({
      queue: r.queue,
      ready: count(r.ready),
      scheduled: count(r.scheduled),
      claimed: count(r.claimed),
      dead: count(r.dead),
      oldestReadyAge: r.oldest_ready_age,
      ...(r.waiting === undefined ? {} : { waiting: count(r.waiting) }),
      ...(r.paused === undefined ? {} : { paused: r.paused }),
    }));
  }

  /** Rows of claim.metrics() (per-queue counters since server start), where the server has it. */
  async metrics(opts = {}) {
    const { rows } = await this._query('SELECT * FROM claim.metrics()', [], opts, 'claim.metrics');
    return rows;
  }

  /**
   * Creates a queue (an admin function). `retain` (keep finished items for
   * itemState) and the other options of newer servers are passed only when
   * given.
   */
  async createQueue(queue, opts = {}) {
    const known = ['lease', 'maxAttempts', 'backoff', 'retain', 'maxActive', 'groupLimit', 'client'];
    for (const key of Object.keys(opts)) {
      if (!known.includes(key)) {
        const err = new InvalidArgumentError(`createQueue has no option "${key}"`, '22023');
        err.hint = `Its options: ${known.filter((k) => k !== 'client').join(', ')}.`;
        throw err;
      }
    }
    const params = [queue, toInterval(opts.lease === undefined ? 30000 : opts.lease, 'lease'),
      opts.maxAttempts === undefined ? 5 : opts.maxAttempts,
      toInterval(opts.backoff === undefined ? 1000 : opts.backoff, 'backoff')];
    let call = 'claim.create_queue($1::text, $2::interval, $3::int, $4::interval';
    const extra = [
      ['retain', 'interval', opts.retain === undefined ? undefined : toInterval(opts.retain, 'retain')],
      ['max_active', 'int', opts.maxActive],
      ['group_limit', 'int', opts.groupLimit],
    ];
    for (const [name, type, value] of extra) {
      if (value === undefined) continue;
      params.push(value);
      call += `, ${name} => $${params.length}::${type}`;
    }
    call += ')';
    await this._query(`SELECT ${call}`, params, opts, params.length > 4 ? 'create_queue with these options' : null);
  }

  /** Stops deliveries from a queue (servers with claim.pause). */
  async pause(queue, opts = {}) {
    await this._query('SELECT claim.pause($1::text)', [queue], opts, 'claim.pause');
  }

  /** Resumes deliveries from a paused queue (servers with claim.resume). */
  async resume(queue, opts = {}) {
    await this._query('SELECT claim.resume($1::text)', [queue], opts, 'claim.resume');
  }

  /** Sets a fair key's weight in a fair queue, 1 to 10000 (an admin function; docs/fairness.md). */
  async setFairWeight(queue, fairKey, weight, opts = {}) {
    await this._query('SELECT claim.set_fair_weight($1::text, $2::text, $3::int)', [queue, fairKey, weight],
      opts, 'claim.set_fair_weight');
  }

  /** Drops a queue with its items (an admin function). */
  async dropQueue(queue, opts = {}) {
    await this._query('SELECT claim.drop_queue($1::text)', [queue], opts);
  }

  /** Ends the pool if this Client created it. */
  async close() {
    if (this._ownsPool) await this.pool.end();
  }
}

module.exports = { Client };
