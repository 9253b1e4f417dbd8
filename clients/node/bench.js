'use strict';

// Throughput of the Worker (no-op handler, 8 concurrent jobs) beside a
// minimal hand-written loop on the same driver (8 concurrent loops, each on
// its own connection: claim_next, then complete), measured in the same run.
//
//   PGCLAIM_BENCH_DSN=postgresql://user@host:port/db node bench.js [jobs per window] [rounds]
//
// (PGCLAIM_TEST_DSN is used when PGCLAIM_BENCH_DSN is not set.) Each round
// runs four windows, hand-written, Worker, Worker, hand-written, on a fresh
// queue filled beforehand (the filling is not timed), so a drift of the
// machine weighs on both sides alike. Prints every window, the means and
// the ratio Worker / hand-written.

const pg = require('pg');
const { Worker, Client } = require('.');

const DSN = process.env.PGCLAIM_BENCH_DSN || process.env.PGCLAIM_TEST_DSN;
const JOBS = Number(process.argv[2] || 20000);
const ROUNDS = Number(process.argv[3] || 1);
const CONCURRENCY = 8;

async function fill(admin, name) {
  await admin.createQueue(name);
  for (let i = 0; i < JOBS; i += 5000) {
    const n = Math.min(5000, JOBS - i);
    await admin.enqueueBatch(name, Array.from({ length: n }, (_, k) => ({ n: i + k })));
  }
}

async function warmPool(max) {
  const pool = new pg.Pool({ connectionString: DSN, max });
  const clients = await Promise.all(Array.from({ length: max }, () => pool.connect()));
  for (const c of clients) c.release();
  return pool;
}

async function handWritten(name) {
  const clients = [];
  for (let i = 0; i < CONCURRENCY; i += 1) {
    const c = new pg.Client({ connectionString: DSN });
    await c.connect();
    clients.push(c);
  }
  let done = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(clients.map(async (c) => {
    for (;;) {
      const { rows } = await c.query('SELECT id, token, payload FROM claim.claim_next($1::text)', [name]);
      if (rows.length === 0) return;
      await c.query('SELECT claim.complete($1::bigint)', [rows[0].token]);
      done += 1;
    }
  }));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  await Promise.all(clients.map((c) => c.end()));
  if (done !== JOBS) throw new Error(`hand-written loop completed ${done} of ${JOBS}`);
  return JOBS / secs;
}

async function withWorker(name) {
  const pool = await warmPool(CONCURRENCY + 2);
  const worker = new Worker({ pool, queue: name, concurrency: CONCURRENCY, wait: 1000, handler: async () => {} });
  let t0;
  let t1;
  const finished = new Promise((resolve) => {
    worker.on('settled', () => {
      if (worker.stats.completed === JOBS) {
        t1 = process.hrtime.bigint();
        resolve();
      }
    });
  });
  t0 = process.hrtime.bigint();
  const running = worker.run();
  await finished;
  await worker.stop();
  await running;
  await pool.end();
  if (worker.stats.completed !== JOBS) throw new Error(`worker completed ${worker.stats.completed} of ${JOBS}`);
  return JOBS / (Number(t1 - t0) / 1e9);
}

async function main() {
  if (!DSN) throw new Error('set PGCLAIM_BENCH_DSN (or PGCLAIM_TEST_DSN)');
  const admin = new Client({ connectionString: DSN });
  const { detectFeatures } = require('./lib/util');
  const f = await detectFeatures(admin.pool);
  console.log(`pg-claim bench: ${JOBS} jobs per window, ${CONCURRENCY} concurrent, ${ROUNDS} round(s); ` +
    `server features: done=${f.done} result=${f.result}`);
  const base = [];
  const work = [];
  let seq = 0;
  const one = async (kind) => {
    const name = `bench_node_${process.pid}_${seq += 1}`;
    await fill(admin, name);
    await admin.pool.query('CHECKPOINT').catch(() => {});
    const rate = kind === 'hand-written' ? await handWritten(name) : await withWorker(name);
    await admin.dropQueue(name);
    (kind === 'hand-written' ? base : work).push(rate);
    console.log(`  ${kind.padEnd(12)} ${rate.toFixed(0).padStart(7)} jobs/s`);
  };
  for (let r = 0; r < ROUNDS; r += 1) {
    await one('hand-written');
    await one('Worker');
    await one('Worker');
    await one('hand-written');
  }
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const b = mean(base);
  const w = mean(work);
  console.log(`hand-written loop (claim_next + complete, 8 loops): ${b.toFixed(0)} jobs/s`);
  console.log(`Worker (no-op handler, concurrency 8):             ${w.toFixed(0)} jobs/s`);
  console.log(`ratio Worker / hand-written: ${(w / b).toFixed(2)}x`);
  await admin.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
