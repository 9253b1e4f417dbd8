'use strict';

// The worker under the faults of issue 43 (and issue 40's defects 2 and 4),
// against a real server: a falsy throw, a transactional job longer than its
// lease, ctx.extend() inside the handler's transaction, a result that cannot
// be stored, a transient error at completion, the per-job listener leak, and
// keyword connection strings.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Worker, Client } = require('..');
const { DSN, uniqueName, makePool, sleep, waitFor } = require('./helpers');
const helpers = require('./helpers');

let pool;
let client;
const { quiet } = helpers;

test.before(async () => {
  ({ pool, client } = helpers.openClient(6));
});
test.after(async () => {
  await pool.end();
});

const newQueue = (prefix, opts) => helpers.newQueue(client, prefix, opts);

async function rows(sql, params) {
  return (await pool.query(sql, params)).rows;
}

test('a handler that throws a falsy value fails its item, never completes it', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_falsy', { maxAttempts: 1 });
  const throws = [
    () => { throw undefined; }, // eslint-disable-line no-throw-literal
    () => { throw null; }, // eslint-disable-line no-throw-literal
    () => { throw 0; }, // eslint-disable-line no-throw-literal
    () => { throw ''; }, // eslint-disable-line no-throw-literal
    () => { throw false; }, // eslint-disable-line no-throw-literal
    () => Promise.reject(),
  ];
  await client.enqueueBatch(queue, throws.map((_, i) => ({ i })));
  for (const transactional of [false, true]) {
    const q = transactional ? await newQueue('node_falsy_tx', { maxAttempts: 1 }) : queue;
    if (transactional) await client.enqueueBatch(q, throws.map((_, i) => ({ i })));
    const worker = new Worker({
      connectionString: DSN, queue: q, concurrency: 3, wait: 200, logger: quiet, transactional,
      handler: async (job) => throws[job.payload.i](),
    });
    const running = worker.run();
    await waitFor(() => worker.stats.failed + worker.stats.completed >= throws.length, { what: 'six outcomes' });
    await worker.stop();
    await running;
    assert.equal(worker.stats.completed, 0, `${transactional ? 'transactional' : 'plain'}: nothing completed`);
    assert.equal(worker.stats.failed, throws.length);
    const dead = await rows('SELECT last_error FROM claim.dead_items WHERE queue = $1', [q]);
    assert.equal(dead.length, throws.length);
    for (const d of dead) assert.match(d.last_error, /non-Error value/);
    await client.dropQueue(q);
  }
});

test('a transactional job longer than its lease commits and completes', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_txlong', { lease: 1000, maxAttempts: 2 });
  const table = uniqueName('node_txlong_t');
  await pool.query(`CREATE TABLE ${table} (id bigint)`);
  const [id] = await client.enqueueBatch(queue, [{}]);
  const worker = new Worker({
    connectionString: DSN, queue, wait: 200, logger: quiet, transactional: true,
    handler: async (job, ctx) => {
      await ctx.client.query(`INSERT INTO ${table} VALUES ($1)`, [job.id]);
      await sleep(3000); // three leases
      return { ok: true };
    },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.completed + worker.stats.failed > 0, { what: 'the outcome', timeout: 20000 });
  await worker.stop();
  await running;
  assert.equal(worker.stats.completed, 1);
  assert.equal(worker.stats.failed, 0);
  const written = await rows(`SELECT id::text FROM ${table}`);
  assert.deepEqual(written.map((r) => r.id), [String(id)]);
  const [s] = await client.stats(queue);
  assert.equal(Number(s.ready) + Number(s.claimed) + Number(s.dead), 0);
  await pool.query(`DROP TABLE ${table}`);
  await client.dropQueue(queue);
});

test('ctx.extend() in transactional mode answers at once', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_txext', { lease: 5000 });
  await client.enqueueBatch(queue, [{}]);
  let took = null;
  const worker = new Worker({
    connectionString: DSN, queue, wait: 200, logger: quiet, transactional: true, grace: 2000,
    handler: async (job, ctx) => {
      const t0 = Date.now();
      const until = await ctx.extend(20000);
      took = Date.now() - t0;
      assert.ok(until instanceof Date || typeof until === 'string');
    },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.completed + worker.stats.failed + worker.stats.released > 0, { what: 'the outcome' });
  await worker.stop();
  await running;
  assert.equal(worker.stats.completed, 1);
  assert.ok(took !== null && took < 2000, `extend took ${took} ms`);
  await client.dropQueue(queue);
});

test('a result that cannot be stored fails the item with a clear error; stop() does not wait the grace', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_badresult', { maxAttempts: 1 });
  await client.enqueueBatch(queue, [{ kind: 'bigint' }, { kind: 'cycle' }]);
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: 2, wait: 200, logger: quiet, grace: 20000,
    handler: async (job) => {
      if (job.payload.kind === 'bigint') return { n: 10n };
      const o = {};
      o.self = o;
      return o;
    },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.failed + worker.stats.completed >= 2, { what: 'two outcomes', timeout: 10000 });
  const t0 = Date.now();
  await worker.stop();
  await running;
  assert.ok(Date.now() - t0 < 5000, `stop took ${Date.now() - t0} ms`);
  assert.equal(worker.stats.failed, 2);
  const dead = await rows('SELECT last_error FROM claim.dead_items WHERE queue = $1', [queue]);
  assert.equal(dead.length, 2);
  for (const d of dead) assert.match(d.last_error, /cannot be stored as JSON/);
  await client.dropQueue(queue);
});

test('a transient error at completion is retried with the same token', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_retrydone', { maxAttempts: 3 });
  await client.enqueueBatch(queue, [{}]);
  const own = makePool(6);
  const query = own.query.bind(own);
  let broken = 0;
  own.query = (sql, params) => {
    const text = typeof sql === 'string' ? sql : sql && sql.text;
    if (typeof text === 'string' && /claim\.complete/.test(text) && broken < 2) {
      broken += 1;
      const err = new Error('Connection terminated unexpectedly');
      err.code = 'ECONNRESET';
      return Promise.reject(err);
    }
    return query(sql, params);
  };
  let runs = 0;
  const worker = new Worker({
    pool: own, queue, wait: 200, logger: quiet,
    handler: async () => { runs += 1; },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.completed > 0, { what: 'the completion' });
  await worker.stop();
  await running;
  await own.end();
  assert.equal(broken, 2);
  assert.equal(runs, 1, 'the job ran once');
  const [s] = await client.stats(queue);
  assert.equal(Number(s.ready) + Number(s.claimed), 0);
  await client.dropQueue(queue);
});

test('transactional mode adds no error listener per job (issue 40 defect 2)', { timeout: 60000 }, async () => {
  const queue = await newQueue('node_leak');
  const jobs = Number(process.env.PGCLAIM_LEAK_JOBS || 300);
  await client.enqueueBatch(queue, Array.from({ length: jobs }, (_, i) => ({ i })));
  const own = makePool(4);
  const seen = new Set();
  const worker = new Worker({
    pool: own, queue, concurrency: 2, wait: 200, logger: quiet, transactional: true,
    handler: async (job, ctx) => { seen.add(ctx.client); },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.completed >= jobs, { what: `${jobs} completions`, timeout: 50000 });
  await worker.stop();
  await running;
  for (const c of seen) {
    assert.ok(c.listenerCount('error') <= 3, `a connection has ${c.listenerCount('error')} error listeners`);
  }
  await own.end();
  await client.dropQueue(queue);
});

test('keyword connection strings work like URLs (issue 40 defect 4)', { timeout: 20000 }, async () => {
  const u = new URL(DSN);
  const kw = `host=${u.hostname} port=${u.port || 5432} dbname=${u.pathname.slice(1)} user=${decodeURIComponent(u.username)}`;
  const c = new Client({ connectionString: kw });
  try {
    assert.ok(Array.isArray(await c.stats()));
  } finally {
    await c.close();
  }
  const saved = process.env.PG_CLAIM_DSN;
  process.env.PG_CLAIM_DSN = kw;
  try {
    const c2 = new Client();
    assert.ok(Array.isArray(await c2.stats()));
    await c2.close();
    // poolConfig adds to PG_CLAIM_DSN rather than replacing it.
    const c3 = new Client({ poolConfig: { max: 2 } });
    assert.ok(Array.isArray(await c3.stats()));
    await c3.close();
  } finally {
    process.env.PG_CLAIM_DSN = saved;
  }
});

/** A TCP proxy to the server that can stop forwarding without closing anything. */
function blackholeProxy(target) {
  const net = require('net');
  const state = { blackhole: false, sockets: new Set() };
  const server = net.createServer((inbound) => {
    state.sockets.add(inbound);
    if (state.blackhole) return; // accepted, never answered
    const outbound = net.connect(target);
    state.sockets.add(outbound);
    inbound.on('data', (d) => { if (!state.blackhole) outbound.write(d); });
    outbound.on('data', (d) => { if (!state.blackhole) inbound.write(d); });
    const close = () => { if (!state.blackhole) { inbound.destroy(); outbound.destroy(); } };
    inbound.on('error', close); outbound.on('error', close);
    inbound.on('close', close); outbound.on('close', close);
  });
  state.listen = () => new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
  state.close = () => {
    for (const s of state.sockets) s.destroy();
    return new Promise((resolve) => server.close(resolve));
  };
  return state;
}

// The worker's connections stop answering without closing (a half-open TCP
// connection) while its claim loop waits in the server and a completion is
// due. stop() is bounded by grace + callTimeout + 2 × min(callTimeout, 5 s):
// the cancel request that gets no answer, the claim that the cancel did not
// end (its socket is closed), the completion retries and the pool's goodbye
// are each given up on; and nothing keeps the process alive afterwards.
test('a connection that stops answering without closing does not hang run() or stop()', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_blackhole', { maxAttempts: 3 });
  await client.enqueueBatch(queue, [{}]);
  const u = new URL(DSN);
  const proxy = blackholeProxy({ host: u.hostname, port: Number(u.port || 5432) });
  const port = await proxy.listen();
  u.port = String(port);
  let started = false;
  const grace = 1000;
  const callTimeout = 1000;
  const worker = new Worker({
    connectionString: u.toString(), queue, wait: '10 s', grace, callTimeout, logger: quiet,
    handler: async () => {
      started = true;
      proxy.blackhole = true; // from now on nothing reaches the server, nothing comes back
      await sleep(100);
    },
  });
  try {
    const running = worker.run();
    await waitFor(() => started, { what: 'the handler to start' });
    await sleep(700); // the claim loop now waits on a connection that no longer answers
    const t0 = Date.now();
    let hung;
    await Promise.race([worker.stop(), new Promise((resolve, reject) => {
      hung = setTimeout(() => reject(new Error('stop() hung')), 20000);
    })]);
    clearTimeout(hung);
    await running;
    const took = Date.now() - t0;
    if (process.env.PGCLAIM_TEST_VERBOSE) console.log(`stop took ${took} ms`);
    // The bound is grace + 3 × callTimeout here; 3 s more for a loaded machine.
    assert.ok(took < grace + 3 * callTimeout + 3000, `stop took ${took} ms`);
    assert.equal(worker.pool.totalCount, 0, 'the worker closed every connection of its pool');
  } finally {
    await proxy.close();
  }
  await client.dropQueue(queue);
});

test('enqueueBatch honours after; a given pool too small for transactional concurrency is refused', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_after');
  const [parent] = await client.enqueueBatch(queue, [{ parent: true }]);
  const kids = await client.enqueueBatch(queue, [{ kid: 1 }, { kid: 2 }], { after: [parent] });
  const states = await rows('SELECT id::text, state FROM claim.items WHERE id = ANY($1::bigint[]) ORDER BY id',
    [kids]).catch(() => null);
  if (states) assert.deepEqual(states.map((r) => r.state), ['w', 'w'], 'the children wait for their parent');
  await client.dropQueue(queue);
  const small = makePool(2);
  const worker = new Worker({ pool: small, queue: 'whatever', concurrency: 4, transactional: true, logger: quiet,
    handler: async () => {} });
  await assert.rejects(worker.run(), /needs at least 5/);
  await small.end();
});

test('a count the server cannot know (NULL on a standby) stays null in stats()', async () => {
  const fake = { query: async () => ({ rows: [{ queue: 'q', ready: null, scheduled: '2', claimed: null, dead: '0', oldest_ready_age: null, waiting: null }] }) };
  const c = new Client({ pool: fake });
  const [s] = await c.stats();
  assert.equal(s.ready, null);
  assert.equal(s.claimed, null);
  assert.equal(s.scheduled, 2);
  assert.equal(s.dead, 0);
  assert.equal(s.waiting, null);
});

test('durations: unit-named options (leaseMs) and intervals; a plain number under the short name warns', async () => {
  const handler = async () => {};
  const a = new Worker({ queue: 'q', handler, leaseMs: 30000, waitMs: 200, graceMs: 1000, callTimeoutMs: 2000 });
  const b = new Worker({ queue: 'q', handler, lease: '30 s', wait: '200 ms', grace: '1 s', callTimeout: '2 s' });
  assert.equal(a.lease, '30000 milliseconds');
  assert.equal(b.lease, '30 s');
  assert.equal(a._waitMs, b._waitMs);
  assert.equal(a.grace, b.grace);
  assert.equal(a.callTimeout, b.callTimeout);
  assert.throws(() => new Worker({ queue: 'q', handler, lease: '1 s', leaseMs: 1000 }), /not both/);
  assert.throws(() => new Worker({ queue: 'q', handler, graceMs: '1 s' }), /graceMs must be a number/);
  assert.throws(() => new Worker({ queue: 'q', handler, grace: 'soon' }), /not a duration/);
  const warned = [];
  const fake = { query: async () => { throw Object.assign(new Error('no'), { code: '3F000' }); } };
  const c = new Worker({ pool: fake, queue: 'q', handler, lease: 30, logger: { info() {}, error() {}, warn: (m) => warned.push(m) } });
  await assert.rejects(c.run());
  assert.equal(warned.length, 1);
  assert.match(warned[0], /lease: 30 is read as milliseconds.*leaseMs: 30.*lease: '0.03 s'/);
});
