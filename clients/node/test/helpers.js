'use strict';

const path = require('path');
const crypto = require('crypto');
const { spawn } = require('child_process');
const pg = require('pg');

const DSN = process.env.PG_CLAIM_DSN;
if (!DSN) {
  throw new Error('PG_CLAIM_DSN is not set (a libpq URL such as postgresql://user@127.0.0.1:5432/db)');
}

/** A queue name no other test (or run) uses. */
function uniqueName(prefix) {
  return `${prefix}_${process.pid}_${crypto.randomBytes(4).toString('hex')}`;
}

function makePool(max = 4) {
  const pool = new pg.Pool({ connectionString: DSN, max });
  pool.on('error', () => {});
  return pool;
}

/** A pool of `max` connections and a Client over it: { pool, client }. */
function openClient(max = 4) {
  const { Client } = require('..');
  const pool = makePool(max);
  return { pool, client: new Client({ pool }) };
}

/** Runs f(pool) with a pool of `max` connections, ended afterwards. */
async function withPool(max, f) {
  const pool = makePool(max);
  try {
    return await f(pool);
  } finally {
    await pool.end();
  }
}

/** A logger that says nothing (for workers whose errors a test provokes). */
const quiet = { info() {}, warn() {}, error() {} };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` (async, returns truthy) every `every` ms until it holds or `timeout` passes. */
async function waitFor(check, { timeout = 30000, every = 100, what = 'condition' } = {}) {
  const until = Date.now() + timeout;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}

/** Starts test/fixtures/worker-child.js with the given settings (env). */
function spawnWorker(env) {
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'worker-child.js')], {
    env: { ...process.env, PG_CLAIM_DSN: DSN, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.output = '';
  child.stdout.on('data', (d) => { child.output += d; });
  child.stderr.on('data', (d) => { child.output += d; });
  child.exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal, at: Date.now() }));
  });
  child.ready = new Promise((resolve) => {
    const onData = (d) => {
      if (String(d).includes('READY')) {
        child.stdout.removeListener('data', onData);
        resolve();
      }
    };
    child.stdout.on('data', onData);
  });
  return child;
}

/** Features of the server's pg_claim beyond 0.1.0. */
async function features(pool) {
  const { detectFeatures } = require('../lib/util');
  return detectFeatures(pool);
}

// A queue of a unique name made with `client` (a Client), for one test.
async function newQueue(client, prefix, opts = {}) {
  const queue = uniqueName(prefix);
  await client.createQueue(queue, opts);
  return queue;
}

module.exports = {
  DSN, uniqueName, makePool, openClient, withPool, quiet, sleep, waitFor, spawnWorker, features, newQueue,
};
