// node-postgres sends a JS array as a PostgreSQL array literal ({...}), which is no JSON.
'use strict';
const { Client } = require('pg');

const check = (name, ok) => console.log(`${ok ? 'ok' : 'not ok'} ${name}`);

async function main() {
  const client = new Client();
  await client.connect();
  const payload = ['a@example.com', 'b@example.com'];
  try {
    await client.query('SELECT claim.enqueue($1, $2)', ['emails', payload]);
    check('an array as a jsonb argument is refused (22P02)', false);
  } catch (err) {
    check('an array as a jsonb argument is refused (22P02)', err.code === '22P02');
  }
  const sent = await client.query('SELECT $1::jsonb AS doc', [JSON.stringify(payload)]);
  check('JSON.stringify(array) arrives as a JSON array', JSON.stringify(sent.rows[0].doc) === JSON.stringify(payload));
  const obj = await client.query('SELECT $1::jsonb AS doc', [{ to: payload }]);
  check('an object is sent as JSON', obj.rows[0].doc.to.length === 2);
  // For a bigint[] argument the array literal is right: the batch form takes a JS array of tokens.
  await client.query("SELECT claim.enqueue('traps'), claim.enqueue('traps')");
  const claimed = await client.query('SELECT token FROM claim.claim_next($1, $2)', ['traps', 2]);
  const tokens = claimed.rows.map((row) => row.token);
  const done = await client.query('SELECT claim.complete_many($1) AS n', [tokens]);
  check('a JS array of tokens as a bigint[] argument', tokens.length === 2 && done.rows[0].n === 2);
  await client.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
