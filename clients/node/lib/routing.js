'use strict';

/**
 * Direct routing to the partitions of a partitioned pg_claim, without the
 * PL/Proxy front (docs/partitions.md, "Clients that route directly"): the
 * same hash, token bits and spread placement as the front's functions.
 */

const MAX_SAFE = 9007199254740991n;

/** 32-bit FNV-1a over the UTF-8 bytes of key, as a signed int4 (0 for null): claim.route_hash. */
function routeHash(key) {
  if (key === null || key === undefined) return 0;
  let h = 2166136261;
  for (const b of Buffer.from(String(key), 'utf8')) {
    h = Math.imul(h ^ b, 16777619) >>> 0;
  }
  return h | 0;
}

/** The partition bits of a token (number, string or bigint): 52..47, or 62..53 above 2^53 - 1. */
function tokenPartition(token) {
  const t = BigInt(token);
  if (t < 0n) return -1;
  return Number(t > MAX_SAFE ? t >> 53n : t >> 47n);
}

/** The partition of a spread queue that holds the items of key: claim.spread_partition. */
function spreadPartition(partitions, key) {
  return partitions[(routeHash(key) >>> 0) % partitions.length];
}

/** An error of a partition that cannot be reached (PC003 at the front). */
class PartitionUnreachableError extends Error {
  constructor(partition, cause) {
    super(`partition ${partition} cannot be reached: ${cause && cause.message}`);
    this.code = 'PC003';
    this.partition = partition;
    this.cause = cause;
  }
}

/**
 * Calls routed to the partitions directly: `new PartitionedClient({ partitions:
 * [dsn0, dsn1, ...] })`, a power of two of connection strings, partition 0
 * first; one pg.Pool per partition.
 */
class PartitionedClient {
  constructor({ partitions, spreadWaitSlice = 50, poolSize = 4 } = {}) {
    if (!Array.isArray(partitions) || partitions.length === 0 || (partitions.length & (partitions.length - 1))) {
      throw new TypeError('partitions: a power of two of connection strings, partition 0 first');
    }
    const pg = require('pg');
    this.pools = partitions.map((connectionString) => {
      const pool = new pg.Pool({ connectionString, max: poolSize });
      pool.on('error', () => {});
      return pool;
    });
    this.slice = spreadWaitSlice;
    this._spread = new Map();
  }

  async end() {
    await Promise.all(this.pools.map((p) => p.end()));
  }

  partitionOf(key) {
    return routeHash(key) & (this.pools.length - 1);
  }

  async _run(k, sql, params) {
    try {
      return (await this.pools[k].query(sql, params)).rows;
    } catch (err) {
      if (err && (typeof err.code !== 'string' || !/^[0-9A-Z]{5}$/.test(err.code) || /^08/.test(err.code) ||
                  err.code === '57P01' || err.code === '57P03')) {
        throw new PartitionUnreachableError(k, err);
      }
      throw require('./errors').mapError(err);
    }
  }

  /** The partitions of a spread queue, null for a queue on one partition (looked up once per client). */
  async spreadPartitions(queue) {
    if (!this._spread.has(queue)) {
      const have = [];
      for (let k = 0; k < this.pools.length; k++) {
        try {
          if ((await this._run(k, 'SELECT 1 FROM claim.queues WHERE name = $1', [queue])).length) have.push(k);
        } catch (err) {
          if (!(err instanceof PartitionUnreachableError) || k === this.partitionOf(queue)) throw err;
        }
      }
      this._spread.set(queue, have.length > 1 ? have : null);
    }
    return this._spread.get(queue);
  }

  async enqueue(queue, payload = {}, { groupKey = null, runAt = null, priority = 0, dedupKey = null } = {}) {
    const sql = 'SELECT claim.enqueue($1, $2::jsonb, $3, $4, $5, $6) AS id';
    const params = [queue, JSON.stringify(payload), groupKey, runAt, priority, dedupKey];
    const parts = await this.spreadPartitions(queue);
    if (!parts) return (await this._run(this.partitionOf(queue), sql, params))[0].id;
    const key = groupKey !== null ? groupKey : dedupKey;
    if (key !== null) return (await this._run(spreadPartition(parts, key), sql, params))[0].id;
    const start = Math.floor(Math.random() * parts.length);
    for (let i = 0; ; i++) {
      try {
        return (await this._run(parts[(start + i) % parts.length], sql, params))[0].id;
      } catch (err) {
        if (!(err instanceof PartitionUnreachableError) || i === parts.length - 1) throw err;
      }
    }
  }

  /** Up to n items, all from one partition (of a spread queue: the first of its partitions in turn that has any). */
  async claimNext(queue, n = 1, { lease = null, wait = 0 } = {}) {
    const sql = 'SELECT * FROM claim.claim_next($1, $2, $3::interval, $4::interval)';
    const parts = await this.spreadPartitions(queue);
    if (!parts) return this._run(this.partitionOf(queue), sql, [queue, n, lease, `${wait} milliseconds`]);
    const deadline = Date.now() + wait;
    let start = Math.floor(Math.random() * parts.length);
    let w = 0;
    for (;;) {
      let reached = 0;
      let last = null;
      for (let i = 0; i < parts.length; i++) {
        try {
          const rows = await this._run(parts[(start + i) % parts.length], sql, [queue, n, lease, `${w} milliseconds`]);
          reached++;
          if (rows.length) return rows;
        } catch (err) {
          if (!(err instanceof PartitionUnreachableError)) throw err;
          last = err;
        }
      }
      if (reached === 0 && last) throw last;
      const left = deadline - Date.now();
      if (left <= 0) return [];
      w = Math.min(this.slice, left);
      start++;
    }
  }

  async complete(token, result = null) {
    return (await this._run(tokenPartition(token), 'SELECT claim.complete($1, $2::jsonb) AS n',
      [String(token), result === null ? null : JSON.stringify(result)]))[0].n;
  }

  /** Tokens of several partitions are completed partition by partition. */
  async completeMany(tokens, skipStale = false) {
    const by = new Map();
    for (const t of tokens) {
      const k = tokenPartition(t);
      if (!by.has(k)) by.set(k, []);
      by.get(k).push(String(t));
    }
    let n = 0;
    for (const [k, ts] of by) {
      n += (await this._run(k, 'SELECT claim.complete_many($1::bigint[], $2) AS n', [ts, skipStale]))[0].n;
    }
    return n;
  }

  async fail(token, error = null, retryIn = null) {
    return (await this._run(tokenPartition(token), 'SELECT claim.fail($1, $2, $3::interval) AS n',
      [String(token), error, retryIn]))[0].n;
  }

  async release(token) {
    return (await this._run(tokenPartition(token), 'SELECT claim.release($1) AS n', [String(token)]))[0].n;
  }
}

module.exports = { routeHash, tokenPartition, spreadPartition, PartitionedClient, PartitionUnreachableError };
