'use strict';

// durable(): durable runs on claim.step / step_done (docs/steps.md): a
// charge, ship, email job that resumes after a failure without charging
// twice; a sleep that parks the run and is not slept again; an event and
// children; a run whose claim was lost records nothing.

const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { durable, RetryError } = require('..');
const { DSN, uniqueName } = require('./helpers');

let client;
let queue;
let hasSteps = false;

test.before(async () => {
  client = new pg.Client({ connectionString: DSN });
  await client.connect();
  const { rows } = await client.query("SELECT to_regprocedure('claim.step(bigint, text)') IS NOT NULL AS ok");
  hasSteps = rows[0].ok;
  if (!hasSteps) return;
  queue = uniqueName('durable').toLowerCase();
  await client.query("SELECT claim.create_queue($1, lease => '30 s', retain => '1 hour', backoff => '0')", [queue]);
  await client.query(`CREATE TABLE ${queue}_fx (item bigint, step text)`);
});

test.after(async () => {
  if (hasSteps) {
    await client.query('SELECT claim.drop_queue($1)', [queue]);
    await client.query(`DROP TABLE IF EXISTS ${queue}_fx`);
  }
  await client.end();
});

const skip = () => (hasSteps ? false : "the server's pg_claim has no durable steps (0.4.0)");

test('charge, ship, email: resumed after a failure, charged once', async (t) => {
  if (skip()) return t.skip(skip());
  const calls = { ship: 0, email: 0 };
  const job = durable(async (ctx) => {
    await ctx.transaction('charge', async (c) => {
      await c.query(`INSERT INTO ${queue}_fx VALUES ($1, 'charge')`, [ctx.id]);
      return { ok: true };
    });
    const parcel = await ctx.step('ship', async () => {
      calls.ship += 1;
      if (calls.ship === 1) throw new Error('shipper down');
      return 'P-1';
    });
    await ctx.step('email', () => { calls.email += 1; });
    return { parcel };
  });
  const { rows } = await client.query("SELECT claim.enqueue($1, '{}')::text AS id", [queue]);
  assert.equal(await job.runOne(client, queue, { wait: '5 s' }), 'failed');
  assert.equal(await job.runOne(client, queue, { wait: '5 s' }), 'completed');
  const fx = await client.query(`SELECT count(*)::int AS n FROM ${queue}_fx`);
  assert.equal(fx.rows[0].n, 1);
  assert.deepEqual(calls, { ship: 2, email: 1 });
  const st = await client.query('SELECT state, result, steps FROM claim.item_state($1, $2::bigint)', [queue, rows[0].id]);
  assert.equal(st.rows[0].state, 'completed');
  assert.deepEqual(st.rows[0].result, { parcel: 'P-1' });
  assert.deepEqual(Object.keys(st.rows[0].steps).sort(), ['charge', 'email', 'ship']);
});

test('sleep parks the run, uncounted, and is not slept again', async (t) => {
  if (skip()) return t.skip(skip());
  const attempts = [];
  const job = durable(async (ctx) => {
    attempts.push(ctx.attempt);
    await ctx.sleep(200);
    return 'woke';
  });
  await client.query("SELECT claim.enqueue($1, '{}')", [queue]);
  assert.equal(await job.runOne(client, queue, { wait: '5 s' }), 'suspended');
  assert.equal(await job.runOne(client, queue, { wait: '10 s' }), 'completed');
  assert.deepEqual(attempts, [1, 1]);
});

test('an event, then two children and their results in order', async (t) => {
  if (skip()) return t.skip(skip());
  const job = durable(async (ctx) => {
    const paid = await ctx.awaitEvent(`paid:${ctx.id}`, '1 hour');
    const kids = await ctx.step('fan-out', async () => {
      const ids = [];
      for (const k of [1, 2]) {
        const r = await ctx.client.query('SELECT claim.enqueue($1, $2::jsonb)::text AS id', [ctx.queue, JSON.stringify({ kid: k })]);
        ids.push(r.rows[0].id);
      }
      return ids;
    });
    return { paid, kids: await ctx.awaitChildren(kids) };
  });
  const kid = durable(async (ctx) => ctx.payload.kid * 10);
  const { rows } = await client.query("SELECT claim.enqueue($1, '{}')::text AS id", [queue]);
  assert.equal(await job.runOne(client, queue, { wait: '5 s' }), 'suspended');
  await client.query('SELECT claim.emit_event($1, $2::jsonb)', [`paid:${rows[0].id}`, '{"amount": 5}']);
  assert.equal(await job.runOne(client, queue, { wait: '5 s' }), 'suspended');
  assert.equal(await kid.runOne(client, queue, { wait: '5 s' }), 'completed');
  assert.equal(await kid.runOne(client, queue, { wait: '5 s' }), 'completed');
  assert.equal(await job.runOne(client, queue, { wait: '5 s' }), 'completed');
  const st = await client.query('SELECT result FROM claim.item_state($1, $2::bigint)', [queue, rows[0].id]);
  assert.deepEqual(st.rows[0].result, { paid: { amount: 5 }, kids: [10, 20] });
});

test('RetryError fails the attempt with its delay; a lost claim records nothing', async (t) => {
  if (skip()) return t.skip(skip());
  const retry = durable(async () => { throw new RetryError(0); });
  await client.query("SELECT claim.enqueue($1, '{}')", [queue]);
  assert.equal(await retry.runOne(client, queue, { wait: '5 s' }), 'failed');
  const lost = durable(async (ctx) => {
    await ctx.client.query('SELECT claim.release($1::bigint)', [ctx.token]);
    return ctx.step('a', () => 1);
  });
  assert.equal(await lost.runOne(client, queue, { wait: '5 s' }), 'stale');
  const r = await client.query("SELECT count(*)::int AS n FROM claim.item_steps WHERE queue = $1 AND step = 'a'", [queue]);
  assert.equal(r.rows[0].n, 0);
});
