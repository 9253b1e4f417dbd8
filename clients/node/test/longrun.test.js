'use strict';

// A long run of the worker in transactional mode: PGCLAIM_LONGRUN_JOBS items
// (1000 in CI; run 100000 by hand with
//   PG_CLAIM_DSN=... PGCLAIM_LONGRUN_JOBS=100000 node --expose-gc test/longrun.test.js
// ), half of them failing on their first attempt or slow. Every item is
// completed exactly once (one row each in a table the handler writes), and
// the heap, the error listeners per connection, the pool's connections and
// the timers stay flat between the first and the last quarter of the run.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Worker, Client } = require('..');
const { DSN, uniqueName, makePool, sleep } = require('./helpers');

const JOBS = Number(process.env.PGCLAIM_LONGRUN_JOBS || 1000);
const CONCURRENCY = 8;

function timers() {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

function heapMB() {
  if (global.gc) global.gc();
  return process.memoryUsage().heapUsed / 1048576;
}

test(`long run: ${JOBS} transactional jobs, half failing once or slow`, { timeout: 3600000 }, async () => {
  const pool = makePool(4);
  const client = new Client({ pool });
  const queue = uniqueName('node_longrun');
  const table = uniqueName('node_longrun_t');
  await client.createQueue(queue, { maxAttempts: 3, backoff: 0 });
  await pool.query(`CREATE TABLE ${table} (id bigint NOT NULL)`);
  for (let i = 0; i < JOBS; i += 10000) {
    const n = Math.min(10000, JOBS - i);
    await client.enqueueBatch(queue, Array.from({ length: n }, (_, k) => ({ k: i + k })));
  }
  const own = makePool(CONCURRENCY + 2);
  const worker = new Worker({
    pool: own, queue, concurrency: CONCURRENCY, wait: 200, transactional: true,
    logger: { info() {}, warn() {}, error: (m) => console.error(m) },
    handler: async (job, ctx) => {
      await ctx.client.query(`INSERT INTO ${table} VALUES ($1)`, [job.id]);
      const k = job.payload.k;
      if (k % 4 === 1 && job.attempt === 1) throw new Error('fails on its first attempt');
      if (k % 4 === 3) await sleep(2);
      return null;
    },
  });
  const samples = [];
  const sample = () => {
    const clients = own._clients || [];
    samples.push({
      done: worker.stats.completed,
      heap: heapMB(),
      listeners: Math.max(0, ...clients.map((c) => c.listenerCount('error'))),
      connections: own.totalCount,
      timers: timers(),
    });
  };
  const t0 = Date.now();
  const running = worker.run();
  const every = setInterval(sample, 250);
  while (worker.stats.completed < JOBS) {
    await sleep(100);
    if (Date.now() - t0 > 3500000) break;
  }
  clearInterval(every);
  sample();
  await worker.stop();
  await running;
  const secs = (Date.now() - t0) / 1000;
  const [{ rows: n, items: distinct }] = (await pool.query(
    `SELECT count(*)::int AS rows, count(DISTINCT id)::int AS items FROM ${table}`)).rows;
  const first = samples[Math.floor(samples.length / 4)] || samples[0];
  const last = samples[samples.length - 1];
  const maxOf = (k) => Math.max(...samples.map((s) => s[k]));
  const report = {
    jobs: JOBS, seconds: secs, perSecond: Math.round(JOBS / secs), failed: worker.stats.failed,
    heapFirstQuarterMB: +first.heap.toFixed(1), heapLastMB: +last.heap.toFixed(1),
    maxListeners: maxOf('listeners'), maxConnections: maxOf('connections'), maxTimers: maxOf('timers'),
  };
  console.log(`longrun ${JSON.stringify(report)}`);
  await pool.query(`DROP TABLE ${table}`);
  await client.dropQueue(queue);
  await own.end();
  await pool.end();
  assert.equal(worker.stats.completed, JOBS);
  assert.equal(n, JOBS, 'one committed row per item: exactly once');
  assert.equal(distinct, JOBS);
  assert.ok(report.maxListeners <= 3, `error listeners per connection: ${report.maxListeners}`);
  assert.ok(report.maxConnections <= CONCURRENCY + 2);
  assert.ok(report.maxTimers <= 2 * CONCURRENCY + 10, `timers: ${report.maxTimers}`);
  if (global.gc) assert.ok(last.heap < first.heap * 1.5 + 8, `heap ${first.heap} -> ${last.heap} MB`);
});
