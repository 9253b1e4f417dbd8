'use strict';

// The Worker in this process against a real server: heartbeat, failures and
// retries, stale tokens, transactional mode, stopping.

const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { Worker, Client, RetryError, StaleTokenError } = require('..');
const { DSN, uniqueName, sleep, waitFor, features } = require('./helpers');
const helpers = require('./helpers');

let pool;
let client;
let feats;
const { quiet } = helpers;

test.before(async () => {
  ({ pool, client } = helpers.openClient(6));
  feats = await features(pool);
});
test.after(async () => {
  await pool.end();
});

const newQueue = (prefix, opts) => helpers.newQueue(client, prefix, opts);

async function newTable(name) {
  await pool.query(`CREATE TABLE ${name} (id bigint NOT NULL, who text NOT NULL, attempt int)`);
  return name;
}

async function rows(sql, params) {
  return (await pool.query(sql, params)).rows;
}

test('the heartbeat keeps a 2 s lease alive through a 6 s handler', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_hb', { lease: 2000 });
  const [id] = await client.enqueueBatch(queue, [{ slow: true }]);
  let started = false;
  let probeClaims = 0;
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: 1, wait: 500, logger: quiet,
    handler: async () => {
      started = true;
      await sleep(6000);
      return 'ok';
    },
  });
  const running = worker.run();
  await waitFor(() => started, { what: 'the handler to start' });
  const until = Date.now() + 5500;
  while (Date.now() < until) {
    // Another claimer would get the item as soon as its lease ran out.
    probeClaims += (await rows('SELECT id FROM claim.claim_next($1::text)', [queue])).length;
    await sleep(250);
  }
  await waitFor(() => worker.stats.completed + worker.stats.stale > 0, { what: 'the outcome' });
  await worker.stop();
  await running;
  assert.equal(probeClaims, 0, 'no one else could claim the item');
  assert.equal(worker.stats.completed, 1);
  assert.equal(worker.stats.stale, 0);
  assert.equal(worker.stats.claimed, 1);
  const [s] = await client.stats(queue);
  assert.equal(s.ready + s.claimed + s.dead, 0, `item ${id} is finished`);
  await client.dropQueue(queue);
});

test('one heartbeat statement extends many jobs (plain mode); a lost lease among them is told apart', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_hb_batch', { lease: 1500 });
  const N = 12;
  await client.enqueueBatch(queue, Array.from({ length: N }, (_, i) => ({ i })));
  let running = 0;
  let lostSeen = 0;
  let victim = null;
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: N, wait: 200, logger: quiet,
    handler: async (job, ctx) => {
      running += 1;
      if (victim === null) victim = job.token;
      await new Promise((resolve) => {
        const t = setTimeout(resolve, 3200); // past two leases
        ctx.signal.addEventListener('abort', () => { lostSeen += 1; clearTimeout(t); resolve(); });
      });
      return null;
    },
  });
  const run = worker.run();
  await waitFor(() => running === N && victim !== null, { what: 'every handler to start' });
  // One lease is lost under the worker (released from outside): the batch that
  // carries its token is refused, and the jobs are extended one by one.
  await pool.query('SELECT claim.release($1::bigint)', [victim]);
  // The released item is claimed again once its first handler gave up.
  await waitFor(() => worker.stats.completed === N && worker.stats.stale === 1, { what: 'every outcome', timeout: 20000 });
  await worker.stop();
  await run;
  assert.equal(worker.stats.claimed, N + 1, `every other lease held through the handler: ${JSON.stringify(worker.stats)}`);
  assert.equal(lostSeen, 1, 'the job whose lease was lost saw its signal aborted');
  // Each job is extended at least twice; most of them together.
  assert.ok(worker.stats.extended >= 2 * (N - 1), JSON.stringify(worker.stats));
  assert.ok(worker.stats.extendCalls * 2 < worker.stats.extended, `statements per extension: ${JSON.stringify(worker.stats)}`);
  await client.dropQueue(queue);
});

test('an exception fails the item with its text; RetryError retries after its delay', { timeout: 30000 }, async () => {
  const queue = await newQueue('node_fail', { maxAttempts: 3, backoff: 60000, ...(feats.itemState ? { retain: 60000 } : {}) });
  const [boomId] = await client.enqueueBatch(queue, [{ kind: 'boom' }]);
  const [retryId] = await client.enqueueBatch(queue, [{ kind: 'retry' }]);
  const seen = [];
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: 2, wait: 200, logger: quiet,
    handler: async (job) => {
      seen.push({ kind: job.payload.kind, attempt: job.attempt, at: Date.now() });
      if (job.payload.kind === 'boom') throw new Error(`boom on attempt ${job.attempt}`);
      if (job.attempt === 1) throw new RetryError(700, 'not yet');
      return { done: true };
    },
  });
  const running = worker.run();
  await waitFor(() => seen.filter((s) => s.kind === 'retry').length >= 2 && worker.stats.completed >= 1,
    { what: 'the retry to run and complete' });
  await worker.stop();
  await running;
  const retries = seen.filter((s) => s.kind === 'retry');
  assert.deepEqual(retries.map((s) => s.attempt), [1, 2]);
  assert.ok(retries[1].at - retries[0].at >= 600, `retried after ${retries[1].at - retries[0].at} ms (asked 700)`);
  // The plain exception got the queue's backoff (60 s): it ran once and waits.
  const booms = seen.filter((s) => s.kind === 'boom');
  assert.equal(booms.length, 1);
  const [item] = await rows('SELECT attempts, last_error FROM claim.items WHERE id = $1::bigint', [boomId])
    .catch(() => [null]);
  if (item) assert.match(String(item.last_error), /boom on attempt 1/);
  assert.equal(worker.stats.failed, 2);
  assert.equal(worker.stats.completed, 1);
  if (feats.itemState) {
    const st = await client.itemState(queue, retryId);
    assert.equal(st.state, 'completed');
    if (feats.result) assert.deepEqual(st.result, { done: true });
  }
  await client.dropQueue(queue);
});

test('an item that exhausts its attempts is dead with the handler\'s error text', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_dead', { maxAttempts: 1 });
  await client.enqueueBatch(queue, [{}]);
  const worker = new Worker({
    connectionString: DSN, queue, wait: 200, logger: quiet,
    handler: async () => { throw new Error('this always fails'); },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.failed === 1, { what: 'the failure' });
  await worker.stop();
  await running;
  const dead = await rows('SELECT last_error FROM claim.dead_items WHERE queue = $1', [queue]);
  assert.equal(dead.length, 1);
  assert.equal(dead[0].last_error, 'this always fails');
  await client.dropQueue(queue);
});

test('a stale token: the outcome is dropped and logged, the new holder keeps the item', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_stale', { lease: 1000 });
  await client.enqueueBatch(queue, [{}]);
  const warnings = [];
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  let handlerSignal;
  const worker = new Worker({
    connectionString: DSN, queue, wait: 200, heartbeat: false,
    logger: { ...quiet, warn: (m) => warnings.push(m) },
    handler: async (job, ctx) => {
      handlerSignal = ctx.signal;
      await gate;
      return 'late';
    },
  });
  const staleEvents = [];
  worker.on('stale', (job, err) => staleEvents.push(err));
  const running = worker.run();
  await waitFor(() => handlerSignal, { what: 'the handler' });
  // Without a heartbeat the 1 s lease runs out; someone else claims the item.
  const [again] = await waitFor(async () => {
    const r = await rows('SELECT id, token, attempt FROM claim.claim_next($1::text)', [queue]);
    return r.length ? r : null;
  }, { what: 'the reclaim' });
  assert.equal(again.attempt, 2);
  release();
  await waitFor(() => worker.stats.stale === 1, { what: 'the stale outcome' });
  assert.equal(worker.stats.completed, 0);
  assert.ok(staleEvents[0] instanceof StaleTokenError);
  assert.ok(warnings.some((w) => /stale token/.test(w)), warnings.join('\n'));
  // The new holder's token is still good.
  await pool.query('SELECT claim.complete($1::bigint)', [again.token]);
  await worker.stop();
  await running;
  await client.dropQueue(queue);
});

test('transactional: the handler\'s writes commit with the completion, or roll back with a failure', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_tx', { maxAttempts: 1 });
  const table = await newTable(`${queue}_w`);
  const ids = await client.enqueueBatch(queue, [{ ok: true }, { ok: false }, { ok: true }]);
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: 3, wait: 200, transactional: true, logger: quiet,
    handler: async (job, ctx) => {
      // The claim was asserted in this transaction before the handler ran.
      const { rows: r } = await ctx.client.query('SELECT pg_catalog.txid_current_if_assigned() IS NOT NULL AS in_tx');
      assert.ok(r);
      await ctx.client.query(`INSERT INTO ${table} VALUES ($1::bigint, 'worker', $2::int)`, [job.id, job.attempt]);
      if (!job.payload.ok) throw new Error('handler failed after writing');
      return { id: job.id };
    },
  });
  const running = worker.run();
  await waitFor(() => worker.stats.completed + worker.stats.failed === 3, { what: 'three outcomes' });
  await worker.stop();
  await running;
  const written = (await rows(`SELECT id FROM ${table} ORDER BY id`)).map((r) => r.id);
  assert.deepEqual(written, [ids[0], ids[2]]);
  const dead = await rows('SELECT id, last_error FROM claim.dead_items WHERE queue = $1', [queue]);
  assert.deepEqual(dead.map((d) => d.id), [ids[1]]);
  assert.equal(dead[0].last_error, 'handler failed after writing');
  await client.dropQueue(queue);
  await pool.query(`DROP TABLE ${table}`);
});

test('transactional: an item reclaimed before the handler\'s transaction leaves none of its writes', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_txlost', { lease: 1000 });
  const table = await newTable(`${queue}_w`);
  // The worker gets a pool of two connections: one for claiming, one held
  // here, so the job can neither heartbeat nor open its transaction.
  const small = new pg.Pool({ connectionString: DSN, max: 2 });
  small.on('error', () => {});
  const held = await small.connect();
  let handlerRuns = 0;
  const worker = new Worker({
    pool: small, queue, concurrency: 1, wait: 200, transactional: true, logger: quiet,
    handler: async (job, ctx) => {
      handlerRuns += 1;
      await ctx.client.query(`INSERT INTO ${table} VALUES ($1::bigint, 'worker', $2::int)`, [job.id, job.attempt]);
    },
  });
  const running = worker.run();
  const [id] = await client.enqueueBatch(queue, [{}]);
  await waitFor(() => worker.stats.claimed === 1, { what: 'the claim' });
  // The lease runs out; another claimer takes the item and finishes it.
  const [again] = await waitFor(async () => {
    const r = await rows('SELECT id, token, attempt FROM claim.claim_next($1::text)', [queue]);
    return r.length ? r : null;
  }, { what: 'the reclaim' });
  assert.equal(again.id, id);
  await pool.query(`INSERT INTO ${table} VALUES ($1::bigint, 'other', $2::int)`, [again.id, again.attempt]);
  await pool.query('SELECT claim.complete($1::bigint)', [again.token]);
  held.release();
  await waitFor(() => worker.stats.stale === 1, { what: 'the worker to see its token is stale' });
  await worker.stop();
  await running;
  await small.end();
  assert.equal(handlerRuns, 0);
  assert.deepEqual(await rows(`SELECT who FROM ${table}`), [{ who: 'other' }]);
  await client.dropQueue(queue);
  await pool.query(`DROP TABLE ${table}`);
});

test('transactional: an item cancelled while its handler runs leaves writes only if it completed', { timeout: 20000 }, async (t) => {
  if (!feats.cancel) {
    t.skip('the server has no claim.cancel');
    return;
  }
  const queue = await newQueue('node_txcancel');
  const table = await newTable(`${queue}_w`);
  const [id] = await client.enqueueBatch(queue, [{}]);
  let inHandler;
  const entered = new Promise((resolve) => { inHandler = resolve; });
  let proceed;
  const gate = new Promise((resolve) => { proceed = resolve; });
  const worker = new Worker({
    connectionString: DSN, queue, wait: 200, transactional: true, logger: quiet,
    handler: async (job, ctx) => {
      await ctx.client.query(`INSERT INTO ${table} VALUES ($1::bigint, 'worker', $2::int)`, [job.id, job.attempt]);
      inHandler();
      await gate;
    },
  });
  const running = worker.run();
  await entered;
  const cancelling = client.cancel(queue, [id]);
  await sleep(300);
  proceed();
  const cancelled = await cancelling;
  await waitFor(() => worker.stats.completed + worker.stats.stale + worker.stats.failed === 1, { what: 'the outcome' });
  await worker.stop();
  await running;
  const written = await rows(`SELECT id FROM ${table}`);
  if (worker.stats.completed === 1) {
    assert.equal(cancelled, 0, 'cancel came after the completion');
    assert.equal(written.length, 1);
  } else {
    assert.equal(cancelled, 1);
    assert.equal(written.length, 0, 'the cancelled handler left no writes');
  }
  await client.dropQueue(queue);
  await pool.query(`DROP TABLE ${table}`);
});

test('an AbortSignal stops the worker; handlers past the grace period are released', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_abort');
  await client.enqueueBatch(queue, [{}, {}, {}]);
  const ac = new AbortController();
  const signals = [];
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: 2, wait: 10000, grace: 300, signal: ac.signal, logger: quiet,
    handler: async (job, ctx) => {
      signals.push(ctx.signal);
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
      return 'too late';
    },
  });
  const running = worker.run();
  await waitFor(() => signals.length === 2, { what: 'two handlers' });
  ac.abort();
  await running;
  assert.ok(signals.every((s) => s.aborted), 'handlers were told to stop');
  assert.equal(worker.stats.released, 2);
  assert.equal(worker.stats.completed, 0);
  const [s] = await client.stats(queue);
  assert.equal(s.claimed, 0);
  assert.equal(s.ready, 3);
  await client.dropQueue(queue);
});

test('stop() during a long wait returns at once (the waiting claim is cancelled)', { timeout: 20000 }, async () => {
  const queue = await newQueue('node_stopwait');
  const worker = new Worker({ connectionString: DSN, queue, wait: 30000, logger: quiet, handler: async () => {} });
  const running = worker.run();
  await sleep(500);
  const t0 = Date.now();
  await worker.stop();
  await running;
  assert.ok(Date.now() - t0 < 10000, `stopped after ${Date.now() - t0} ms`);
  // run() resolved after the cancel request was answered: a process that
  // exits then leaves no cancel request open (a pooler in between may
  // mishandle a cancel client that leaves first).
  assert.equal(worker._cancels.size, 0);
  // An item enqueued now stays ready: nothing claims it.
  await client.enqueueBatch(queue, [{}]);
  const [s] = await client.stats(queue);
  assert.equal(s.ready, 1);
  await client.dropQueue(queue);
});

test('Client: enqueue inside the caller\'s transaction, enqueueBatch, stats', async () => {
  const queue = await newQueue('node_client');
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await client.enqueue(queue, { rolled: 'back' }, { client: c });
    await c.query('ROLLBACK');
    await c.query('BEGIN');
    const id = await client.enqueue(queue, { kept: true }, { client: c, priority: 5 });
    assert.match(id, /^[0-9]+$/);
    let [s] = await client.stats(queue);
    assert.equal(s.ready, 0, 'not visible before commit');
    await c.query('COMMIT');
    [s] = await client.stats(queue);
    assert.equal(s.ready, 1);
  } finally {
    c.release();
  }
  const ids = await client.enqueueBatch(queue, [{ a: 1 }, [1, 2], 'text', null]);
  assert.equal(ids.length, 4);
  const payloads = await rows('SELECT payload FROM claim.claim_next($1::text, 10) ORDER BY id', [queue]);
  assert.deepEqual(payloads.map((r) => r.payload), [{ kept: true }, { a: 1 }, [1, 2], 'text', null]);
  await client.dropQueue(queue);
});

test('Client: itemState waits for the outcome (when the server has it)', { timeout: 20000 }, async (t) => {
  if (!feats.itemState) {
    t.skip('the server has no claim.item_state');
    return;
  }
  const queue = await newQueue('node_state', { retain: 60000 });
  const id = await client.enqueue(queue, { x: 1 });
  assert.equal((await client.itemState(queue, id)).state, 'ready');
  const worker = new Worker({
    connectionString: DSN, queue, wait: 200, logger: quiet,
    handler: async () => { await sleep(300); return { answer: 42 }; },
  });
  const running = worker.run();
  const st = await client.itemState(queue, id, { wait: 10000 });
  await worker.stop();
  await running;
  assert.equal(st.state, 'completed');
  if (feats.result) assert.deepEqual(st.result, { answer: 42 });
  await client.dropQueue(queue);
});

test('a fast handler costs about one claim per `concurrency` jobs', { timeout: 30000 }, async () => {
  const N = 800;
  const queue = await newQueue('node_batch');
  await client.enqueueBatch(queue, Array.from({ length: N }, (_, i) => ({ i })));
  const worker = new Worker({ connectionString: DSN, queue, concurrency: 8, lanes: 1, wait: 200, logger: quiet, handler: async () => null });
  const running = worker.run();
  await waitFor(() => worker.stats.completed === N, { what: 'all completions' });
  await worker.stop();
  await running;
  assert.equal(worker.stats.claimed, N);
  // Each claim asks for every free slot (8 here); a few come back short.
  assert.ok(worker.stats.claimCalls <= N / 4, `${worker.stats.claimCalls} claim calls for ${N} jobs`);
  const [s] = await client.stats(queue);
  assert.equal(s.ready + s.claimed + s.dead, 0);
  await client.dropQueue(queue);
});

test('Client.metrics: rows, or NotSupportedError on servers without claim.metrics', async () => {
  const { rows: r } = await pool.query("SELECT count(*)::int AS n FROM pg_proc WHERE proname = 'metrics' AND pronamespace = 'claim'::regnamespace");
  if (r[0].n > 0) assert.ok(Array.isArray(await client.metrics()));
  else await assert.rejects(client.metrics(), require('..').NotSupportedError);
});

for (const piggyback of [false, true]) {
  test(`one stale token among finished items (piggyback: ${piggyback}): it alone is dropped`, { timeout: 20000 }, async (t) => {
    if (piggyback && !feats.done) {
      t.skip('the server has no claim_next(done)');
      return;
    }
    const queue = await newQueue(`node_mixed${piggyback ? 'p' : 'a'}`, { lease: 1000 });
    const [idA, idB] = await client.enqueueBatch(queue, [{ name: 'A' }, { name: 'B' }]);
    let open;
    const gate = new Promise((resolve) => { open = resolve; });
    const started = new Set();
    const worker = new Worker({
      connectionString: DSN, queue, concurrency: 2, wait: 200, heartbeat: false, piggyback, logger: quiet,
      handler: async (job, ctx) => {
        // B keeps its claim alive by hand; A lets its 1 s lease run out.
        if (job.payload.name === 'B') await ctx.extend(10000);
        started.add(job.payload.name);
        await gate;
      },
    });
    const outcomes = {};
    worker.on('settled', (job, outcome) => { outcomes[job.payload.name] = outcome; });
    const running = worker.run();
    await waitFor(() => started.size === 2, { what: 'both handlers' });
    const [again] = await waitFor(async () => {
      const r = await rows('SELECT id, token FROM claim.claim_next($1::text)', [queue]);
      return r.length ? r : null;
    }, { what: 'the reclaim of A' });
    assert.equal(again.id, idA);
    open(); // both finish in the same turn: their completions go out together
    await waitFor(() => outcomes.A && outcomes.B, { what: 'both outcomes' });
    assert.deepEqual(outcomes, { A: 'stale', B: 'completed' });
    assert.equal(worker.piggyback, piggyback);
    await worker.stop();
    await running;
    await pool.query('SELECT claim.complete($1::bigint)', [again.token]);
    const [s] = await client.stats(queue);
    assert.equal(s.ready + s.claimed + s.dead, 0, `B (${idB}) and A are finished`);
    await client.dropQueue(queue);
  });
}

test('two claim loops (lanes: 2) share the slots: every item once', { timeout: 30000 }, async () => {
  const N = 1000;
  const queue = await newQueue('node_lanes');
  await client.enqueueBatch(queue, Array.from({ length: N }, (_, i) => ({ i })));
  const seen = new Map();
  let maxRunning = 0;
  let running = 0;
  const worker = new Worker({
    connectionString: DSN, queue, concurrency: 8, lanes: 2, wait: 200, logger: quiet,
    handler: async (job) => {
      running += 1;
      maxRunning = Math.max(maxRunning, running);
      seen.set(job.id, (seen.get(job.id) || 0) + 1);
      await sleep(job.payload.i % 3);
      running -= 1;
    },
  });
  const run = worker.run();
  await waitFor(() => worker.stats.completed === N, { what: 'all completions' });
  await worker.stop();
  await run;
  assert.equal(seen.size, N);
  assert.ok([...seen.values()].every((n) => n === 1));
  assert.ok(maxRunning <= 8, `at most 8 handlers at once (saw ${maxRunning})`);
  assert.equal(worker.stats.stale, 0);
  const [s] = await client.stats(queue);
  assert.equal(s.ready + s.claimed + s.dead, 0);
  await client.dropQueue(queue);
});
