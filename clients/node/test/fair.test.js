'use strict';
// Fair queues (docs/fairness.md): fairKey on enqueue and enqueueBatch,
// setFairWeight, and claims that serve every key.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('..');
const { DSN, uniqueName } = require('./helpers');

test('fairKey and setFairWeight: every key is served, the heavy key the most', async (t) => {
  const client = new Client({ connectionString: DSN });
  const queue = uniqueName('fair');
  try {
    const { rows: has } = await client.pool.query(
      "SELECT count(*)::int AS n FROM pg_proc WHERE proname = 'set_fair_weight'");
    if (has[0].n === 0) {
      t.skip('the server\'s pg_claim has no fair queues');
      return;
    }
    await client.pool.query("SELECT claim.create_queue($1::text, fair => true)", [queue]);
    await client.setFairWeight(queue, 'heavy', 3);
    await client.enqueueBatch(queue, Array(40).fill({ k: 'heavy' }), { fairKey: 'heavy' });
    await client.enqueueBatch(queue, Array(40).fill({ k: 'light' }), { fairKey: 'light' });
    const solo = await client.enqueue(queue, { k: 'solo' }, { fairKey: 'solo' });
    assert.ok(BigInt(solo) > 0n);
    const { rows } = await client.pool.query(
      "SELECT payload->>'k' AS k FROM claim.claim_next($1::text, n => 9)", [queue]);
    const count = (k) => rows.filter((r) => r.k === k).length;
    assert.equal(count('solo'), 1);
    assert.ok(count('light') >= 1);
    assert.ok(count('heavy') > count('light'));
    const { rows: stats } = await client.pool.query(
      'SELECT fair_key, weight FROM claim.fair_stats WHERE queue = $1 AND fair_key IS NOT NULL ORDER BY fair_key',
      [queue]);
    assert.deepEqual(stats.map((r) => [r.fair_key, r.weight]), [['heavy', 3], ['light', 1], ['solo', 1]]);
  } finally {
    await client.pool.query('SELECT claim.drop_queue($1::text) FROM claim.queues WHERE name = $1', [queue]);
    await client.close();
  }
});
