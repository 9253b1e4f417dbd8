'use strict';

// What a new user meets: error classes that say what happened, a worker that
// stops at once on what can never work and backs off on the rest, one log
// line per failure, a default worker name, and the connection from
// PG_CLAIM_DSN or libpq's PG* variables.

const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const test = require('node:test');
const assert = require('node:assert/strict');
const pgc = require('..');
const { DSN, uniqueName, waitFor, sleep } = require('./helpers');
const helpers = require('./helpers');

const {
  Client, Worker, PgClaimError, UnknownQueueError, InvalidArgumentError, NotInstalledError, TransientError,
  PermissionDeniedError, mapError, isFatal, errorClass,
} = pgc;

const { quiet } = helpers;
let pool;
let client;
const queues = [];

async function newQueue(prefix, opts = {}) {
  const q = uniqueName(prefix);
  await client.createQueue(q, opts);
  queues.push(q);
  return q;
}

test.before(async () => {
  ({ pool, client } = helpers.openClient(6));
});
test.after(async () => {
  for (const q of queues) await client.dropQueue(q).catch(() => {});
  await pool.end();
});

function capture() {
  const lines = { info: [], warn: [], error: [] };
  return {
    lines,
    logger: {
      info: (m) => lines.info.push(m),
      warn: (m) => lines.warn.push(m),
      error: (m) => lines.error.push(m),
    },
  };
}

test('error classes say what happened', async () => {
  const q = await newQueue('node_cls');
  await assert.rejects(client.createQueue(uniqueName('node_x'), { lease: 'soon' }), (err) => {
    assert.ok(err instanceof InvalidArgumentError, err && err.constructor.name);
    assert.equal(err.code, '22007');
    return true;
  });
  await assert.rejects(client.createQueue(uniqueName('node_x'), { retian: 1000 }), (err) => {
    assert.ok(err instanceof InvalidArgumentError);
    assert.match(err.message, /retian/);
    assert.match(err.hint, /retain/);
    return true;
  });
  await assert.rejects(client.stats(uniqueName('node_missing')), UnknownQueueError);
  assert.deepEqual((await client.stats(q)).map((r) => r.queue), [q]);
  // The table of the README, shared with the Python client.
  const table = {
    '08006': TransientError, '40001': TransientError, '57P01': TransientError, '53300': TransientError,
    '22007': InvalidArgumentError, '3F000': NotInstalledError, '42704': UnknownQueueError, XX000: PgClaimError,
  };
  for (const [code, Cls] of Object.entries(table)) assert.equal(errorClass(code, 'x'), Cls, code);
  assert.ok(mapError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })) instanceof TransientError);
  assert.ok(mapError(new Error('Connection terminated unexpectedly')) instanceof TransientError);
  assert.equal(isFatal(new Error('Connection terminated unexpectedly')), false);
  assert.equal(isFatal({ code: '22007', message: 'x' }), true);
});

for (const [label, options, code] of [
  ['a bad interval', { wait: 'soon' }, '22007'],
  ['a wait out of range', { waitMs: 2 * 3600 * 1000 }, '22023'],
  ['a lease of 0', { leaseMs: 0 }, '22023'],
]) {
  test(`the worker stops at once on ${label}`, async () => {
    const q = await newQueue('node_bad');
    const { lines, logger } = capture();
    const t0 = Date.now();
    const worker = new Worker({ connectionString: DSN, queue: q, concurrency: 3, lanes: 2, logger, handler: async () => {}, ...options });
    await assert.rejects(worker.run(), (err) => {
      assert.ok(err instanceof InvalidArgumentError, `${err && err.constructor.name}: ${err && err.message}`);
      assert.equal(err.code, code);
      return true;
    });
    assert.ok(Date.now() - t0 < 10000);
    assert.equal(lines.error.length, 1, lines.error.join('\n'));
    assert.match(lines.error[0], /stopping/);
    assert.equal(lines.warn.length, 0, lines.warn.join('\n'));
  });
}

test('the worker stops at once on a missing queue, and when its queue is dropped', async () => {
  await assert.rejects(new Worker({ connectionString: DSN, queue: uniqueName('node_none'), logger: quiet, handler: async () => {} }).run(),
    UnknownQueueError);
  const q = uniqueName('node_drop');
  await client.createQueue(q);
  const worker = new Worker({ connectionString: DSN, queue: q, concurrency: 2, wait: 300, logger: quiet, handler: async () => {} });
  // The rejection may come before dropQueue returns (a waiting claim ends as
  // soon as the drop is announced): the handler is attached first.
  const stopped = assert.rejects(worker.run(), UnknownQueueError);
  await sleep(500);
  await client.dropQueue(q);
  await stopped;
});

test('the worker stops at once without a grant, and without the extension', async (t) => {
  const role = uniqueName('pgc_norole');
  await pool.query(`CREATE ROLE ${role} LOGIN`);
  try {
    const url = new URL(DSN);
    url.username = role;
    url.password = '';
    const probe = new (require('pg').Client)({ connectionString: url.toString() });
    try {
      await probe.connect();
      await probe.end();
    } catch (err) {
      t.skip(`cannot log in as a new role through this DSN (${err.message})`);
      return;
    }
    const q = await newQueue('node_grant');
    await assert.rejects(new Worker({ connectionString: url.toString(), queue: q, wait: 200, logger: quiet, handler: async () => {} }).run(),
      PermissionDeniedError);
  } finally {
    await pool.query(`DROP ROLE ${role}`);
  }
  const db = uniqueName('pgc_noext');
  try {
    await pool.query(`CREATE DATABASE ${db}`);
  } catch (err) {
    t.diagnostic(`no database without the extension here: ${err.message}`);
    return;
  }
  try {
    const url = new URL(DSN);
    url.pathname = `/${db}`;
    const other = new Client({ connectionString: url.toString() });
    try {
      await assert.rejects(other.stats(), NotInstalledError);
      await assert.rejects(other.enqueue('q', {}), NotInstalledError);
    } catch (err) {
      if (!(err instanceof assert.AssertionError)) throw err;
      throw err;
    } finally {
      await other.close();
    }
    await assert.rejects(new Worker({ connectionString: url.toString(), queue: 'q', logger: quiet, handler: async () => {} }).run(),
      NotInstalledError);
  } finally {
    await pool.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  }
});

test('a lost connection is retried with backoff: the worker goes on', async () => {
  const q = await newQueue('node_lost');
  const name = uniqueName('node_lost_worker');
  const seen = [];
  const { lines, logger } = capture();
  const worker = new Worker({
    connectionString: DSN, queue: q, wait: 1000, worker: name, logger, poolConfig: { application_name: name },
    handler: async (job) => { seen.push(job.id); },
  });
  const running = worker.run();
  await sleep(500);
  await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name]);
  const [id] = await client.enqueueBatch(q, [{}]);
  await waitFor(() => seen.includes(id), { timeout: 20000, what: 'the job after the reconnect' });
  await worker.stop();
  await running;
  assert.equal(lines.error.length, 0, lines.error.join('\n'));
});

test('a handler failure is one warning line; default logging shows it', async () => {
  const q = await newQueue('node_fail');
  const [id] = await client.enqueueBatch(q, [{}]);
  const { lines, logger } = capture();
  const worker = new Worker({
    connectionString: DSN, queue: q, waitMs: 200, logger,
    handler: async () => { throw new TypeError('no such customer'); },
  });
  worker.on('failed', () => worker.stop());
  await worker.run();
  assert.equal(lines.warn.length, 1, lines.warn.join('\n'));
  assert.match(lines.warn[0], new RegExp(`job ${id} attempt 1 failed: TypeError: no such customer$`));
  // No logger given: console.warn, on stderr.
  const [id2] = await client.enqueueBatch(q, [{}]);
  const code = `const { Worker } = require(${JSON.stringify(path.join(__dirname, '..'))});
const w = new Worker({ queue: process.argv[1], waitMs: 200, handler: async () => { throw new Error('bad payload'); } });
w.on('failed', () => w.stop());
w.run().then(() => process.exit(0), (e) => { console.error('run rejected', e); process.exit(1); });`;
  const child = spawnSync(process.execPath, ['-e', code, q], { env: { ...process.env, PG_CLAIM_DSN: DSN }, encoding: 'utf8', timeout: 30000 });
  assert.equal(child.status, 0, child.stderr);
  const out = child.stderr.split('\n').filter((l) => l.trim());
  assert.equal(out.length, 1, child.stderr);
  assert.match(out[0], new RegExp(`job ${id2} attempt 1 failed: Error: bad payload`));
});

test('a stale token is one line', async () => {
  const q = await newQueue('node_stale1', { lease: 1000 });
  const [id] = await client.enqueueBatch(q, [{}]);
  const { lines, logger } = capture();
  const worker = new Worker({
    connectionString: DSN, queue: q, waitMs: 200, logger,
    handler: async (job) => {
      await client.cancel(q, [job.id]);
      await sleep(1500);
    },
  });
  worker.on('settled', () => worker.stop());
  await worker.run();
  assert.equal(worker.stats.stale, 1);
  const all = [...lines.warn, ...lines.error];
  assert.equal(all.length, 1, all.join('\n'));
  assert.match(all[0], new RegExp(`job ${id} attempt 1: stale token`));
});

test('the default worker name is host:pid', async () => {
  const q = await newQueue('node_name');
  await client.enqueueBatch(q, [{}]);
  let holder = null;
  const worker = new Worker({
    connectionString: DSN, queue: q, wait: 200, logger: quiet,
    handler: async (job) => {
      const { rows } = await pool.query('SELECT worker FROM claim.claimed_items WHERE id = $1', [job.id]);
      holder = rows[0].worker;
    },
  });
  worker.on('settled', () => worker.stop());
  await worker.run();
  assert.equal(holder, `${os.hostname()}:${process.pid}`);
});

test('the connection comes from PG_CLAIM_DSN, else the PG* variables', async () => {
  const q = await newQueue('node_env');
  const url = new URL(DSN);
  const code = `const { Client } = require(${JSON.stringify(path.join(__dirname, '..'))});
const c = new Client();
c.stats(process.argv[1]).then(async (r) => { console.log(r[0].queue); await c.close(); }, (e) => { console.error(e.message); process.exit(1); });`;
  const viaDsn = spawnSync(process.execPath, ['-e', code, q], { env: { ...process.env, PG_CLAIM_DSN: DSN }, encoding: 'utf8', timeout: 30000 });
  assert.equal(viaDsn.status, 0, viaDsn.stderr);
  assert.equal(viaDsn.stdout.trim(), q);
  const env = { ...process.env };
  delete env.PG_CLAIM_DSN;
  Object.assign(env, {
    PGHOST: url.hostname, PGPORT: url.port || '5432', PGDATABASE: decodeURIComponent(url.pathname.slice(1)),
    PGUSER: decodeURIComponent(url.username),
  });
  if (url.password) env.PGPASSWORD = decodeURIComponent(url.password);
  const viaPg = spawnSync(process.execPath, ['-e', code, q], { env, encoding: 'utf8', timeout: 30000 });
  assert.equal(viaPg.status, 0, viaPg.stderr);
  assert.equal(viaPg.stdout.trim(), q);
});
