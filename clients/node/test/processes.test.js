'use strict';

// Worker processes against a real server: many jobs across two processes,
// SIGKILL, SIGTERM and the grace period.

const test = require('node:test');
const assert = require('node:assert/strict');
const { DSN, uniqueName, waitFor, spawnWorker } = require('./helpers');
const helpers = require('./helpers');

let pool;
let client;
test.before(async () => {
  ({ pool, client } = helpers.openClient(4));
});
test.after(async () => {
  await pool.end();
});

async function setup(prefix, { lease = 30000, maxAttempts = 5, items, pk = false }) {
  const queue = uniqueName(prefix);
  const table = `${queue}_runs`;
  await client.createQueue(queue, { lease, maxAttempts });
  await pool.query(`CREATE TABLE ${table} (id bigint ${pk ? 'PRIMARY KEY' : 'NOT NULL'}, worker text NOT NULL, attempt int NOT NULL)`);
  const ids = [];
  for (let i = 0; i < items; i += 5000) {
    const chunk = Array.from({ length: Math.min(5000, items - i) }, (_, k) => ({ n: i + k }));
    ids.push(...(await client.enqueueBatch(queue, chunk)));
  }
  return { queue, table, ids };
}

async function cleanup({ queue, table }) {
  await client.dropQueue(queue);
  await pool.query(`DROP TABLE ${table}`);
}

async function count(table, what = 'count(*)') {
  const { rows } = await pool.query(`SELECT ${what} AS n FROM ${table}`);
  return Number(rows[0].n);
}

async function queueEmpty(queue) {
  const [s] = await client.stats(queue);
  return s.ready === 0 && s.scheduled === 0 && s.claimed === 0 && s.dead === 0;
}

async function stopChild(child) {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  return child.exited;
}

test('10k jobs, concurrency 8, two worker processes: each runs and completes exactly once', { timeout: 90000 }, async () => {
  const N = 10000;
  const ctx = await setup('node_10k', { items: N });
  const a = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', WORKER_NAME: 'a' });
  const b = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', WORKER_NAME: 'b' });
  try {
    await waitFor(async () => (await count(ctx.table)) >= N, { timeout: 80000, what: '10k handler runs' });
    await waitFor(() => queueEmpty(ctx.queue), { timeout: 10000, what: 'an empty queue' });
  } finally {
    await Promise.all([stopChild(a), stopChild(b)]);
  }
  assert.equal(await count(ctx.table), N, 'handler runs');
  assert.equal(await count(ctx.table, 'count(DISTINCT id)'), N, 'distinct items');
  const { rows } = await pool.query(`SELECT worker, count(*)::int AS n FROM ${ctx.table} GROUP BY worker ORDER BY worker`);
  assert.equal(rows.length, 2, `both processes worked: ${JSON.stringify(rows)}`);
  assert.ok(await queueEmpty(ctx.queue), 'nothing left, claimed or dead');
  for (const c of [a, b]) {
    const m = /STOPPED (.*)/.exec(c.output);
    assert.ok(m, `child output: ${c.output}`);
    assert.equal(JSON.parse(m[1]).stale, 0);
  }
  await cleanup(ctx);
});

test('a worker killed with SIGKILL: its jobs are redelivered after the lease, nothing is lost', { timeout: 60000 }, async () => {
  const N = 300;
  // Transactional mode: a run is recorded only if its completion commits.
  const ctx = await setup('node_kill', { items: N, lease: 1500, pk: true });
  const a = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', TRANSACTIONAL: '1', SLEEP_MS: '30', WORKER_NAME: 'a' });
  let b;
  try {
    await waitFor(async () => (await count(ctx.table)) >= 40, { what: 'the first worker to make progress' });
    const { rows: held } = await pool.query('SELECT id FROM claim.claimed_items WHERE queue = $1 AND live', [ctx.queue]);
    a.kill('SIGKILL');
    await a.exited;
    assert.ok(held.length > 0, 'the killed worker held items');
    b = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', TRANSACTIONAL: '1', WORKER_NAME: 'b' });
    await waitFor(async () => (await count(ctx.table)) >= N, { timeout: 40000, what: 'all items done' });
    await waitFor(() => queueEmpty(ctx.queue), { timeout: 10000, what: 'an empty queue' });
    // Items the killed worker held came back with a higher attempt count.
    const { rows: redelivered } = await pool.query(
      `SELECT count(*)::int AS n FROM ${ctx.table} WHERE worker = 'b' AND attempt >= 2`);
    assert.ok(redelivered[0].n >= 1, 'some items were redelivered after the lease');
  } finally {
    if (b) await stopChild(b);
  }
  assert.equal(await count(ctx.table), N);
  await cleanup(ctx);
});

test('SIGTERM mid-run: nothing lost or duplicated, exit within the grace period', { timeout: 60000 }, async () => {
  const N = 400;
  const GRACE = 3000;
  // Plain mode and no primary key: every handler run is recorded, so a run
  // that happened twice would show.
  const ctx = await setup('node_term', { items: N });
  const a = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', SLEEP_MS: '200', GRACE: String(GRACE), WORKER_NAME: 'a' });
  let b;
  try {
    await waitFor(async () => (await count(ctx.table)) >= 30, { what: 'progress' });
    const sentAt = Date.now();
    a.kill('SIGTERM');
    const exit = await a.exited;
    assert.equal(exit.code, 0, a.output);
    assert.ok(exit.at - sentAt < GRACE, `exited ${exit.at - sentAt} ms after SIGTERM (grace ${GRACE} ms)`);
    const stats = JSON.parse(/STOPPED (.*)/.exec(a.output)[1]);
    assert.equal(stats.stale, 0);
    // Nothing is held by the stopped worker.
    const [s] = await client.stats(ctx.queue);
    assert.equal(s.claimed, 0, 'no claims left behind');
    b = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', WORKER_NAME: 'b' });
    await waitFor(async () => (await count(ctx.table)) >= N, { timeout: 40000, what: 'all items done' });
    await waitFor(() => queueEmpty(ctx.queue), { timeout: 10000, what: 'an empty queue' });
  } finally {
    if (b) await stopChild(b);
  }
  assert.equal(await count(ctx.table), N, 'handler runs');
  assert.equal(await count(ctx.table, 'count(DISTINCT id)'), N, 'distinct items');
  assert.equal(await count(`${ctx.table} WHERE attempt > 1`), 0, 'no item was delivered twice');
  await cleanup(ctx);
});

test('SIGTERM with handlers longer than the grace period: they are released and redone, each effect once', { timeout: 60000 }, async () => {
  const N = 20;
  const GRACE = 1000;
  const ctx = await setup('node_grace', { items: N, pk: true });
  const a = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '4', TRANSACTIONAL: '1', SLEEP_MS: '20000', GRACE: String(GRACE), WORKER_NAME: 'a' });
  let b;
  try {
    await waitFor(async () => {
      const [s] = await client.stats(ctx.queue);
      return s.claimed === 4;
    }, { what: 'four claims' });
    const sentAt = Date.now();
    a.kill('SIGTERM');
    const exit = await a.exited;
    assert.equal(exit.code, 0, a.output);
    assert.ok(exit.at - sentAt < GRACE + 2000, `exited ${exit.at - sentAt} ms after SIGTERM (grace ${GRACE} ms)`);
    const stats = JSON.parse(/STOPPED (.*)/.exec(a.output)[1]);
    assert.equal(stats.released, 4, a.output);
    const [s] = await client.stats(ctx.queue);
    assert.equal(s.claimed, 0);
    assert.equal(s.ready, N, 'released items are ready at once');
    assert.equal(await count(ctx.table), 0, 'the rolled-back handlers left no writes');
    b = spawnWorker({ QUEUE: ctx.queue, TABLE: ctx.table, CONCURRENCY: '8', TRANSACTIONAL: '1', WORKER_NAME: 'b' });
    await waitFor(async () => (await count(ctx.table)) >= N, { timeout: 20000, what: 'all items done' });
    await waitFor(() => queueEmpty(ctx.queue), { timeout: 10000, what: 'an empty queue' });
  } finally {
    if (b) await stopChild(b);
  }
  assert.equal(await count(ctx.table), N);
  await cleanup(ctx);
});

void DSN;
