'use strict';

// lib/coordination.js: a session kept alive in the background, election,
// barrier, latch and a resuming watch.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Session, watch } = require('../lib/coordination');
const { withPool, uniqueName, sleep } = require('./helpers');

test('a session keeps itself alive, leads, and releases on close', () => withPool(4, async (pool) => {
  const name = uniqueName('node/leader');
  const s = await Session.open(pool, { ttl: 0.6, holder: 'node-a' });
  const lead = await s.elect(name);
  assert.ok(lead && lead.epoch > s.id);
  await sleep(1000); // past its ttl: the keepalives kept it
  assert.equal(s.lost, false);
  const other = await Session.open(pool, { ttl: 5 });
  assert.equal(await other.elect(name), null);
  assert.equal(await s.close(), 1);
  const again = await other.elect(name, { wait: 5 });
  assert.ok(again && again.epoch > lead.epoch);
  assert.equal(await again.resign(), true);
  await other.close();
}));

test('a session ended behind its back emits lost', () => withPool(2, async (pool) => {
  const s = await Session.open(pool, { ttl: 0.3 });
  const lost = new Promise((resolve) => s.once('lost', resolve));
  await pool.query('SELECT claim.session_close($1)', [s.id]);
  const err = await lost;
  assert.equal(err.code, 'PC001');
  assert.equal(await s.close(), 0);
}));

test('barrier, latch and a resuming watch', () => withPool(4, async (pool) => {
  const prefix = uniqueName('node/w');
  const s = await Session.open(pool);
  const orders = await Promise.all([s.barrier(`${prefix}/b`, 2, 10), s.barrier(`${prefix}/b`, 2, 10)]);
  assert.deepEqual(orders.sort(), [1, 2]);
  await s.latch(`${prefix}/l`, 1);
  assert.equal(await s.latchWait(`${prefix}/l`, 0.05), false);
  assert.equal(await s.countDown(`${prefix}/l`), 0);
  assert.equal(await s.latchWait(`${prefix}/l`, 5), true);
  const seen = [];
  const ac = new AbortController();
  for await (const c of watch(pool, prefix, { wait: 0.2, signal: ac.signal })) {
    seen.push(c.event);
    if (seen.length === 2) ac.abort();
  }
  assert.deepEqual(seen, ['set', 'count_down']);
  await s.close();
}));

test('a lock held with the session', () => withPool(2, async (pool) => {
  const name = uniqueName('node/lock');
  const s = await Session.open(pool, { ttl: 5 });
  const l = await s.lock(name);
  assert.ok(l && l.token > s.id);
  assert.equal(await s.lock(name), null);
  assert.equal(await l.release(), true);
  const again = await s.lock(name);
  assert.ok(again && again.token > l.token);
  assert.equal(await s.close(), 1); // the session released it
}));

test('a shared lock held by many sessions', () => withPool(2, async (pool) => {
  const name = uniqueName('node/shared');
  const a = await Session.open(pool, { ttl: 5 });
  const b = await Session.open(pool, { ttl: 5 });
  const la = await a.sharedLock(name);
  const lb = await b.sharedLock(name);
  assert.ok(la && lb && lb.token > la.token);
  assert.equal(await a.lock(name), null); // the exclusive mode waits for both
  assert.equal(await la.release(), true);
  assert.equal(await lb.release(), true);
  const x = await a.lock(name);
  assert.ok(x && x.token > lb.token);
  await a.close();
  await b.close();
}));
