'use strict';

// Tokens as large as pg_claim hands out (partition 63: from 63 * 2^47 up to
// 2^53 - 1) reach the handler exactly and complete, also through a pool
// whose int8 parser turns bigint into a JavaScript Number, the way many
// programs configure node-postgres.

const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { Worker, Client } = require('..');
const { DSN, uniqueName, waitFor, quiet } = require('./helpers');

const FIRST_OF_63 = 63n * 2n ** 47n;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

let admin;
let dbName;
let dsn;

// The database of these tests is a partition of its own: created here (the
// test role owns the cluster), connected to directly (also when DSN goes
// through PgBouncer, whose server port inet_server_port() names).
test.before(async () => {
  admin = new pg.Client({ connectionString: DSN });
  await admin.connect();
  const { rows } = await admin.query('SELECT pg_catalog.inet_server_port() AS port');
  dbName = uniqueName('node_tokens').toLowerCase();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const url = new URL(DSN);
  if (rows[0].port !== null) url.port = String(rows[0].port);
  url.pathname = `/${dbName}`;
  dsn = url.toString();
  const setup = new pg.Client({ connectionString: dsn });
  await setup.connect();
  await setup.query('CREATE EXTENSION pg_claim');
  await setup.query('SELECT claim.set_partition(63)');
  await setup.end();
});

test.after(async () => {
  if (dbName) await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
});

function numberPool() {
  const pool = new pg.Pool({
    connectionString: dsn,
    max: 4,
    types: {
      getTypeParser: (oid, format) => (oid === 20 ? (v) => parseInt(v, 10) : pg.types.getTypeParser(oid, format)),
    },
  });
  pool.on('error', () => {});
  return pool;
}

test('tokens of partition 63 are safe integers, carried as strings, and complete', { timeout: 60000 }, async () => {
  const pool = numberPool();
  try {
    const client = new Client({ pool });
    const queue = uniqueName('node_tok');
    await client.createQueue(queue);
    await client.enqueueBatch(queue, [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }, { n: 5 }]);
    const seen = [];
    const worker = new Worker({
      pool, queue, concurrency: 2, wait: 200, logger: quiet,
      handler: async (job) => {
        seen.push(job.token);
        return { ok: true };
      },
    });
    const running = worker.run();
    await waitFor(() => worker.stats.completed >= 5, { what: 'five completions' });
    worker.stop();
    await running;
    assert.equal(seen.length, 5);
    for (const token of seen) {
      assert.equal(typeof token, 'string');
      assert.match(token, /^[0-9]+$/);
      const big = BigInt(token);
      assert.ok(big > FIRST_OF_63, `token ${token} is in partition 63`);
      assert.ok(big <= MAX_SAFE, `token ${token} is at most 2^53 - 1`);
      assert.ok(Number.isSafeInteger(Number(token)));
    }
    assert.equal(worker.stats.stale, 0);
    const { rows } = await pool.query(
      'SELECT count(*)::int AS n FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = $1', [queue]);
    assert.equal(rows[0].n, 0, 'every item completed under its own token');
  } finally {
    await pool.end();
  }
});

test('claim.token_partition and claim.partition agree on partition 63', async () => {
  const pool = numberPool();
  try {
    const { rows } = await pool.query(
      "SELECT claim.partition() AS p, claim.token_partition(claim.lease_acquire('node_tok_lease', '1 minute')) AS tp");
    assert.equal(rows[0].p, 63);
    assert.equal(rows[0].tp, 63);
  } finally {
    await pool.end();
  }
});
