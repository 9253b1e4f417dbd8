'use strict';

// A durable three-step job on pg_claim: charge, ship, email (docs/steps.md).
//
//   PG_CLAIM_DSN=postgresql://user@host:port/db node clients/node/example-durable.js
//
// The charge step writes its row through the step's own transaction, so the
// charge and its checkpoint commit together: however often the job is
// delivered again, the card is charged once. Shipping and the email call
// other services (here: functions that log), at least once, with an
// idempotency key. Between charge and ship the job sleeps without holding a
// worker.

const pg = require('pg');
const { durable } = require('.');

const SETUP = `
CREATE TABLE IF NOT EXISTS example_charges (
    run bigint PRIMARY KEY, order_id bigint NOT NULL, amount numeric NOT NULL,
    charged_at timestamptz NOT NULL DEFAULT now());
DO $$ BEGIN
    PERFORM claim.create_queue('example_orders', lease => '30 s');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;`;

async function charge(client, run, order) {
  // The primary key is the run: a second charge of one run would fail.
  await client.query('INSERT INTO example_charges (run, order_id, amount) VALUES ($1, $2, $3)',
    [run, order.order, order.amount]);
  return { charged: order.amount };
}

async function ship(order, key) {
  console.log(`ship order ${order.order} (idempotency key ${key})`);
  return { parcel: `P-${order.order}` };
}

async function email(order, parcel, key) {
  console.log(`mail: order ${order.order} shipped as ${parcel} (idempotency key ${key})`);
}

const orderJob = durable(async (ctx) => {
  const paid = await ctx.transaction('charge', (client) => charge(client, ctx.id, ctx.payload));
  await ctx.sleep(ctx.payload.coolOffMs || 0);
  const parcel = await ctx.step('ship', () => ship(ctx.payload, ctx.key('ship')));
  await ctx.step('email', () => email(ctx.payload, parcel.parcel, ctx.key('email')));
  return { paid, parcel };
});

async function main() {
  const client = new pg.Client({ connectionString: process.env.PG_CLAIM_DSN });
  await client.connect();
  await client.query(SETUP);
  for (const n of [1, 2, 3]) {
    await client.query('SELECT claim.enqueue($1, $2::jsonb)',
      ['example_orders', JSON.stringify({ order: n, amount: 10 * n, coolOffMs: 1000 })]);
  }
  await client.end();
  // Three runs, each delivered twice (the sleep parks it in between).
  await orderJob.run('example_orders', { wait: '5 s', maxRuns: 6 });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
