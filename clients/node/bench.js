'use strict';

// Throughput of the Worker (no-op handler, 8 concurrent jobs) beside a
// minimal hand-written loop on the same driver (8 concurrent loops, each on
// its own connection: claim_next, then complete), measured in the same run.
//
//   PG_CLAIM_DSN=postgresql://user@host:port/db node bench.js [jobs per window] [rounds]
//
// (Without PG_CLAIM_DSN, libpq's PG* variables.) Each round
// runs its windows in mirrored order (hand-written, Worker, Worker,
// hand-written; on a server with claim_next(done), also the Worker with
// `piggyback: true`), each on a fresh queue filled beforehand (the
// filling is not timed), so a drift of the machine weighs on every side
// alike. Prints every window, the means and the ratios to the hand-written
// loop.

const pg = require('pg');
const { Worker, Client } = require('.');

const DSN = process.env.PG_CLAIM_DSN || undefined;
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

async function withWorker(name, piggyback) {
  const pool = await warmPool(CONCURRENCY + 2);
  const worker = new Worker({ pool, queue: name, concurrency: CONCURRENCY, waitMs: 1000, piggyback, handler: async () => {} });
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
  const admin = new Client({ connectionString: DSN });
  const { detectFeatures } = require('./lib/util');
  const f = await detectFeatures(admin.pool);
  const { rows: [settings] } = await admin.pool.query(
    "SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sc");
  console.log(`pg-claim bench: ${JOBS} jobs per window, ${CONCURRENCY} concurrent, ${ROUNDS} round(s); ` +
    `server: claim_next(done) ${f.done ? 'yes' : 'no'}, fsync ${settings.fsync}, synchronous_commit ${settings.sc}`);
  // With claim_next(done), the Worker whose claims carry completions is measured too.
  const kinds = ['hand-written', 'Worker'];
  if (f.done) kinds.push('Worker, done');
  const label = {
    'hand-written': 'hand-written loop (claim_next + complete, 8 loops)',
    Worker: 'Worker (no-op handler, concurrency 8)',
    'Worker, done': 'Worker (the same, piggyback: true: claim_next(done => ...))',
  };
  const rates = Object.fromEntries(kinds.map((k) => [k, []]));
  let seq = 0;
  const one = async (kind) => {
    const name = `bench_node_${process.pid}_${seq += 1}`;
    await fill(admin, name);
    await admin.pool.query('CHECKPOINT').catch(() => {});
    let rate;
    if (kind === 'hand-written') rate = await handWritten(name);
    else rate = await withWorker(name, kind === 'Worker, done');
    await admin.dropQueue(name);
    rates[kind].push(rate);
    console.log(`  ${kind.padEnd(14)} ${rate.toFixed(0).padStart(7)} jobs/s`);
  };
  for (let r = 0; r < ROUNDS; r += 1) {
    // Mirrored order, so a drift of the machine weighs on every side alike.
    for (const kind of kinds) await one(kind);
    for (const kind of [...kinds].reverse()) await one(kind);
  }
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const base = mean(rates['hand-written']);
  for (const kind of kinds) {
    const m = mean(rates[kind]);
    const ratio = kind === 'hand-written' ? '' : `   ratio ${(m / base).toFixed(2)}x`;
    console.log(`${label[kind].padEnd(72)} ${m.toFixed(0).padStart(7)} jobs/s${ratio}`);
  }
  await admin.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
