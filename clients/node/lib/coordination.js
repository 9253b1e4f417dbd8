'use strict';

// The coordination service of pg_claim from Node (docs/coordination.md):
//  * Session: opens a session, keeps it alive every third of its ttl on a
//    connection of the pool, and closes it (close()); 'lost' is emitted when
//    a keepalive is refused (PC001: everything it carried is released);
//  * session.elect(name, { wait }) -> { epoch, resign() } or null;
//  * session.lock(name, { wait }) -> { token, release() } or null: a lease
//    attached to the session (claim.session_lease); session.sharedLock the
//    same in shared mode;
//  * session.barrier, latch, countDown, latchWait;
//  * watch(pool, prefix, { after, wait, signal }): an async iterator over
//    the changes under prefix that resumes after the last revision it
//    yielded; a PC004 error (err.code) when that revision was compacted.
// Ids and epochs are returned as strings when above 2^53 - 1 would be
// possible; pg_claim keeps them below, so they are converted to Number.
// Every call is one statement: all of it works through PgBouncer in
// transaction mode.

const { EventEmitter } = require('events');

const secs = (s) => `${Number(s)} seconds`;
const num = (v) => (v === null || v === undefined ? null : Number(v));

class Session extends EventEmitter {
  /** Opens a session: await Session.open(pool, { ttl, holder, lockDelay }). */
  static async open(pool, { ttl = 10, holder = null, lockDelay = 0 } = {}) {
    const { rows } = await pool.query('SELECT claim.session_open($1, $2, $3) AS id',
      [secs(ttl), holder, secs(lockDelay)]);
    return new Session(pool, num(rows[0].id), ttl);
  }

  constructor(pool, id, ttl) {
    super();
    this.pool = pool;
    this.id = id;
    this.ttl = ttl;
    this.lost = false;
    this.timer = setInterval(() => this._keepalive(), (ttl * 1000) / 3);
    this.timer.unref();
  }

  async _keepalive() {
    try {
      await this.pool.query('SELECT claim.session_keepalive($1)', [this.id]);
    } catch (err) {
      if (err.code === 'PC001') {
        this.lost = true;
        clearInterval(this.timer);
        this.emit('lost', err);
      }
      // other errors (a broken connection): the next keepalive tries again
    }
  }

  async _one(sql, params) {
    const { rows } = await this.pool.query(sql, params);
    return rows[0].v;
  }

  /** Campaign for `name`, waiting up to `wait` seconds: { name, epoch, resign() } or null. */
  async elect(name, { wait = 0, holder = null } = {}) {
    const epoch = num(await this._one('SELECT claim.elect($1, NULL, $2, $3, $4) AS v',
      [name, this.id, holder, secs(wait)]));
    if (epoch === null) return null;
    return {
      name,
      epoch,
      resign: async () => this._one('SELECT claim.resign($1, $2) AS v', [name, epoch]),
    };
  }

  /** A lease held as long as the session: { name, token, release() } or null. */
  async lock(name, { wait = 0 } = {}) {
    return this._lease(name, wait, 'exclusive');
  }

  /** The same in shared mode: many sessions hold it at once; lock() waits for all. */
  async sharedLock(name, { wait = 0 } = {}) {
    return this._lease(name, wait, 'shared');
  }

  async _lease(name, wait, mode) {
    const token = num(await this._one('SELECT claim.session_lease($1, $2, NULL, 1, $3, $4) AS v',
      [this.id, name, secs(wait), mode]));
    if (token === null) return null;
    return {
      name,
      token,
      release: async () => this._one('SELECT claim.lease_release($1, $2) AS v', [name, token]),
    };
  }

  async barrier(name, parties, wait) {
    return num(await this._one('SELECT claim.barrier($1, $2, $3) AS v', [name, parties, secs(wait)]));
  }

  async latch(name, count) {
    await this.pool.query('SELECT claim.latch($1, $2)', [name, count]);
  }

  async countDown(name) {
    return num(await this._one('SELECT claim.count_down($1) AS v', [name]));
  }

  async latchWait(name, wait = 0) {
    return this._one('SELECT claim.latch_wait($1, $2) AS v', [name, secs(wait)]);
  }

  /** Stops the keepalives and ends the session; resolves to the leaderships it carried. */
  async close() {
    clearInterval(this.timer);
    if (this.lost) return 0;
    try {
      return num(await this._one('SELECT claim.session_close($1) AS v', [this.id]));
    } catch (err) {
      if (err.code === 'PC001') return 0;
      throw err;
    }
  }
}

/** Yields every change under `prefix` after `after`, waiting up to `wait` s per statement. */
async function* watch(pool, prefix, { after = 0, wait = 30, signal = null } = {}) {
  let revision = after;
  while (!(signal && signal.aborted)) {
    const { rows } = await pool.query(
      'SELECT revision, kind, name, event, token, holder, at FROM claim.watch($1, $2, $3)',
      [prefix, revision, secs(wait)]);
    for (const r of rows) {
      revision = num(r.revision);
      yield { ...r, revision, token: num(r.token) };
    }
  }
}

module.exports = { Session, watch };
