// A pg_claim worker with node-postgres. Connects with the libpq environment (PGHOST, ...).
'use strict';
const { Client } = require('pg');

const STALE = 'PC001'; // the token is not the live claim (lease lost, item finished)

// The user's write and complete commit together, fenced by assert_token.
async function finish(client, id, token, address) {
  try {
    await client.query('BEGIN');
    await client.query('SELECT claim.assert_token($1)', [token]);
    await client.query('INSERT INTO sent_mail (item_id, token, address) VALUES ($1, $2, $3)', [id, token, address]);
    // a JS array would be sent as a PostgreSQL array literal: JSON.stringify it
    await client.query('SELECT claim.complete($1, $2)', [token, JSON.stringify([address])]);
    await client.query('COMMIT');
    return true;
  } catch (err) {
    await client.query('ROLLBACK');
    if (err.code !== STALE) throw err;
    console.log('stale', token, err.code); // rolled back: nothing of this item was written
    return false;
  }
}

async function main() {
  const client = new Client();
  await client.connect();
  let last = null;
  for (;;) {
    const { rows } = await client.query(
      "SELECT id, token, payload->>'to' AS address FROM claim.claim_next($1, wait => $2)", ['emails', '1 second']);
    if (rows.length === 0) break; // the queue stayed empty for a second
    const { id, token, address } = rows[0]; // id and token are strings: bigint is not a JS number
    if (address === null) {
      await client.query('SELECT claim.fail($1, $2)', [token, 'no address']);
      console.log('failed', id, token);
      continue;
    }
    await client.query('SELECT claim.extend($1, $2)', [token, '30 seconds']); // heartbeat
    if (await finish(client, id, token, address)) console.log('done', id, token);
    last = [id, token, address];
  }
  if (last) await finish(client, ...last); // a finished token again: what a worker that lost its lease sees
  await client.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
