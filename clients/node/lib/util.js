'use strict';

const net = require('net');
const pg = require('pg');

/**
 * A duration for the server: a number is milliseconds, a string is passed on
 * as a PostgreSQL interval ('30 seconds'), null/undefined stays NULL.
 */
function toInterval(value, what) {
  if (value === null || value === undefined) return null;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new TypeError(`${what} must be a finite number of milliseconds >= 0`);
    return `${Math.round(value)} milliseconds`;
  }
  if (typeof value === 'string') return value;
  throw new TypeError(`${what} must be milliseconds (number) or an interval (string)`);
}

/**
 * Makes a pg.Pool from { pool } or { connectionString } (or other pg.Pool
 * options). With none of them: $PG_CLAIM_DSN, else libpq's PG* variables
 * (which node-postgres reads itself).
 */
/**
 * Parses a libpq keyword/value connection string
 * ("host=/var/run/postgresql port=5432 dbname=app", values optionally in
 * single quotes with backslash escapes) into node-postgres settings.
 */
function parseKeywordDsn(dsn) {
  const out = {};
  const re = /\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|((?:[^\s'\\]|\\.)*))/gy;
  let m;
  let at = 0;
  while (at < dsn.length && (m = re.exec(dsn)) !== null) {
    const raw = m[2] !== undefined ? m[2] : m[3];
    out[m[1].toLowerCase()] = raw.replace(/\\(.)/g, '$1');
    at = re.lastIndex;
  }
  if (dsn.slice(at).trim() !== '') {
    throw new TypeError(`invalid connection string near "${dsn.slice(at).trim().slice(0, 40)}": ` +
      'use a URL (postgresql://user@host:5432/db) or keyword=value pairs (host=... dbname=...)');
  }
  const config = {};
  const names = { host: 'host', hostaddr: 'host', port: 'port', dbname: 'database', user: 'user',
    password: 'password', application_name: 'application_name', options: 'options' };
  for (const [key, value] of Object.entries(out)) {
    if (names[key]) config[names[key]] = key === 'port' ? Number(value) : value;
    else if (key === 'connect_timeout') config.connectionTimeoutMillis = Number(value) * 1000;
    else if (key === 'sslmode') {
      if (value === 'disable') config.ssl = false;
      else if (value === 'require' || value === 'prefer' || value === 'allow') config.ssl = { rejectUnauthorized: false };
      else config.ssl = true;
    } else if (key === 'keepalives_idle') config.keepAliveInitialDelayMillis = Number(value) * 1000;
  }
  return config;
}

/** node-postgres settings from a URL or a keyword/value connection string. */
function dsnConfig(dsn) {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(dsn.trim())) return { connectionString: dsn };
  return parseKeywordDsn(dsn);
}

// Every connection of the clients sends TCP keepalives from 10 s of
// silence on, so that a peer that vanished (a half-open connection) is
// noticed in about a minute rather than the system's two hours.
const KEEPALIVE_DEFAULTS = { keepAlive: true, keepAliveInitialDelayMillis: 10000 };

function makePool(options, max) {
  if (options.pool) return { pool: options.pool, owned: false };
  const config = { ...KEEPALIVE_DEFAULTS };
  const dsn = options.connectionString || process.env.PG_CLAIM_DSN;
  if (dsn) Object.assign(config, dsnConfig(dsn));
  if (options.poolConfig) Object.assign(config, options.poolConfig);
  if (max !== undefined && config.max === undefined) config.max = max;
  const pool = new pg.Pool(config);
  // An idle client that loses its connection must not crash the process.
  pool.on('error', () => {});
  return { pool, owned: true };
}

/**
 * Sends PostgreSQL's CancelRequest for whatever statement `client` is running,
 * on a connection of its own to the same host and port (PgBouncer forwards
 * it to the right server). A backend that is not running a statement ignores
 * it. Resolves once the request is sent (or could not be); never rejects.
 */
function cancelActive(client, timeoutMs = 5000) {
  return new Promise((resolve) => {
    if (!client || client.processID === null || client.processID === undefined || client.secretKey === null ||
        client.secretKey === undefined) {
      resolve(false);
      return;
    }
    const host = client.host || 'localhost';
    const port = client.port || 5432;
    const target = host.startsWith('/') ? { path: `${host}/.s.PGSQL.${port}` } : { host, port };
    const msg = Buffer.alloc(16);
    msg.writeInt32BE(16, 0);
    msg.writeInt32BE(80877102, 4);
    msg.writeInt32BE(client.processID | 0, 8);
    msg.writeInt32BE(client.secretKey | 0, 12);
    let settled = false;
    const finish = (ok) => {
      if (!settled) {
        settled = true;
        resolve(ok);
      }
    };
    // Send the request and wait for the other side to close the connection,
    // as libpq does: a client that closes first can crash PgBouncer 1.18.
    const socket = net.connect(target, () => {
      socket.write(msg);
    });
    socket.on('data', () => {});
    socket.on('end', () => socket.destroy());
    socket.setTimeout(timeoutMs, () => socket.destroy());
    // The connect itself is bounded too (a SYN that is never answered).
    const hard = setTimeout(() => { socket.destroy(); finish(false); }, timeoutMs + 100);
    if (hard.unref) hard.unref();
    socket.on('close', () => clearTimeout(hard));
    socket.on('error', () => finish(false));
    socket.on('close', () => finish(true));
  });
}

const FEATURE_SQL = `
SELECT
  EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'claim' AND p.proname = 'claim_next' AND 'done' = ANY (p.proargnames)) AS done,
  EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'claim' AND p.proname = 'complete' AND p.proargtypes[0] = 'pg_catalog.int8'::pg_catalog.regtype
            AND 'result' = ANY (p.proargnames)) AS result,
  EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'claim' AND p.proname = 'cancel') AS cancel,
  EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'claim' AND p.proname = 'item_state') AS item_state`;

/** What the server's pg_claim offers beyond 0.1.0. */
async function detectFeatures(queryable) {
  const { rows } = await queryable.query(FEATURE_SQL);
  const r = rows[0];
  return {
    done: r.done,
    result: r.result,
    cancel: r.cancel,
    itemState: r.item_state,
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Closes a node-postgres client's socket at once, without the goodbye that
 * client.end() sends and waits for: a peer that stopped answering would
 * hold end() (and the process) until TCP gives up.
 */
function destroySocket(client) {
  const stream = client && client.connection && client.connection.stream;
  if (stream && !stream.destroyed) stream.destroy();
}

/** `promise`, or undefined once `ms` passed, whichever comes first. */
function within(promise, ms) {
  let timer;
  return Promise.race([promise, new Promise((resolve) => { timer = setTimeout(resolve, Math.max(ms, 0)); })])
    .finally(() => clearTimeout(timer));
}

module.exports = {
  toInterval, makePool, dsnConfig, parseKeywordDsn, cancelActive, detectFeatures, sleep, destroySocket, within,
};
