'use strict';

// SQLSTATE -> error class, against a real server.

const test = require('node:test');
const assert = require('node:assert/strict');
const pgc = require('..');
const { uniqueName } = require('./helpers');
const helpers = require('./helpers');

const {
  Client, PgClaimError, StaleTokenError, PermitMismatchError, UnknownQueueError, InvalidArgumentError,
  PermissionDeniedError, ReadOnlyError, DuplicateQueueError, NotSupportedError, RetryError, mapError,
} = pgc;

let pool;
let client;
let queue;
test.before(async () => {
  ({ pool, client } = helpers.openClient(3));
  queue = uniqueName('node_err');
  await client.createQueue(queue);
});
test.after(async () => {
  await client.dropQueue(queue);
  await pool.end();
});

async function rejectsWith(promise, Cls, code) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err && err.constructor.name}: ${err && err.message}`);
    assert.ok(err instanceof PgClaimError);
    assert.equal(err.code, code);
    assert.ok(err.message.length > 0);
    return true;
  });
}

const raw = (sql, params) => pool.query(sql, params).catch((err) => { throw mapError(err); });

test('unknown queue -> UnknownQueueError (42704)', async () => {
  await rejectsWith(client.enqueue(uniqueName('nope'), {}), UnknownQueueError, '42704');
});

test('out of range and NULL arguments -> InvalidArgumentError (22023, 22004)', async () => {
  await rejectsWith(raw('SELECT * FROM claim.claim_next($1::text, 0)', [queue]), InvalidArgumentError, '22023');
  await rejectsWith(raw('SELECT claim.enqueue(NULL::text, \'{}\'::jsonb)'), InvalidArgumentError, '22004');
});

test('stale token -> StaleTokenError (PC001)', async () => {
  await rejectsWith(raw('SELECT claim.complete($1::bigint)', ['123456789']), StaleTokenError, 'PC001');
  // A real token, finished once, is stale the second time.
  await client.enqueue(queue, { a: 1 });
  const { rows } = await pool.query('SELECT token FROM claim.claim_next($1::text)', [queue]);
  await pool.query('SELECT claim.complete($1::bigint)', [rows[0].token]);
  await rejectsWith(raw('SELECT claim.complete($1::bigint)', [rows[0].token]), StaleTokenError, 'PC001');
});

test('lease permit mismatch -> PermitMismatchError (PC002)', async () => {
  const name = uniqueName('node_lease');
  const { rows } = await pool.query("SELECT token FROM claim.lease_acquire($1::text, '10 seconds'::interval, permits => 2) AS token", [name]);
  assert.ok(rows[0].token);
  await rejectsWith(raw("SELECT claim.lease_acquire($1::text, '10 seconds'::interval, permits => 3)", [name]), PermitMismatchError, 'PC002');
  await pool.query('SELECT claim.lease_release($1::text, $2::bigint)', [name, rows[0].token]);
});

test('duplicate queue -> DuplicateQueueError (42710)', async () => {
  await rejectsWith(client.createQueue(queue), DuplicateQueueError, '42710');
});

test('read-only transaction -> ReadOnlyError (25006)', async () => {
  const c = await pool.connect();
  try {
    await c.query('BEGIN READ ONLY');
    await rejectsWith(client.enqueue(queue, {}, { client: c }), ReadOnlyError, '25006');
  } finally {
    await c.query('ROLLBACK');
    c.release();
  }
});

test('no privileges -> PermissionDeniedError (42501)', async (t) => {
  const { rows } = await pool.query('SELECT rolsuper OR rolcreaterole AS ok FROM pg_roles WHERE rolname = current_user');
  if (!rows[0].ok) {
    t.skip('the test role may not create roles');
    return;
  }
  const role = uniqueName('node_norights');
  await pool.query(`CREATE ROLE ${role} NOLOGIN`);
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query(`SET LOCAL ROLE ${role}`);
    await rejectsWith(client.enqueue(queue, {}, { client: c }), PermissionDeniedError, '42501');
  } finally {
    await c.query('ROLLBACK');
    c.release();
    await pool.query(`DROP ROLE ${role}`);
  }
});

test('other errors: transient ones are TransientError, a SQLSTATE without a class is a PgClaimError, others pass unchanged', () => {
  const ser = mapError(Object.assign(new Error('x'), { code: '40001' }));
  assert.ok(ser instanceof pgc.TransientError && ser instanceof PgClaimError);
  assert.equal(ser.code, '40001');
  const other = mapError(Object.assign(new Error('x'), { code: '2202E' }));
  assert.equal(other.constructor, PgClaimError);
  assert.equal(other.code, '2202E');
  const plain = new TypeError('not a function');
  assert.equal(mapError(plain), plain);
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
  const mapped = mapError(refused);
  assert.ok(mapped instanceof pgc.TransientError);
  assert.equal(mapped.code, null);
  assert.equal(mapped.cause, refused);
  assert.ok(mapError(new Error('Connection terminated unexpectedly')) instanceof pgc.TransientError);
});

test('functions the server lacks -> NotSupportedError', async (t) => {
  const { features } = require('./helpers');
  const f = await features(pool);
  if (f.cancel) t.diagnostic('claim.cancel exists: checking that it works instead');
  if (f.cancel) assert.equal(await client.cancel(queue, ['987654321']), 0);
  else await assert.rejects(client.cancel(queue, ['1']), NotSupportedError);
  if (f.itemState) assert.equal(await client.itemState(queue, '987654321'), null);
  else await assert.rejects(client.itemState(queue, '1'), NotSupportedError);
});

test('RetryError checks its delay', () => {
  assert.throws(() => new RetryError(-1), TypeError);
  assert.throws(() => new RetryError('soon'), TypeError);
  const r = new RetryError(1500, 'busy');
  assert.equal(r.afterMs, 1500);
  assert.equal(r.message, 'busy');
});

test('bad connection settings fail fast: BadConnectionError (3D000, 28000), a TypeError for a bad string', async () => {
  const { Worker, BadConnectionError, TransientError } = pgc;
  const { quiet } = helpers;
  const u = new URL(process.env.PG_CLAIM_DSN);
  // The server itself, also when PG_CLAIM_DSN is a pooler's.
  const { rows: [srv] } = await pool.query('SELECT host(inet_server_addr()) AS host, inet_server_port() AS port');
  u.hostname = srv.host;
  u.port = String(srv.port);
  const noDb = new URL(u.toString());
  noDb.pathname = `/${uniqueName('no_such_db')}`;
  const noRole = new URL(u.toString());
  noRole.username = uniqueName('no_such_role');
  for (const [dsn, code] of [[noDb.toString(), '3D000'], [noRole.toString(), '28000']]) {
    const c = new Client({ connectionString: dsn });
    await rejectsWith(c.stats(), BadConnectionError, code);
    await c.close();
    const t0 = Date.now();
    const w = new Worker({ connectionString: dsn, queue, wait: 200, logger: quiet, handler: async () => {} });
    await assert.rejects(w.run(), (err) => err instanceof BadConnectionError && !(err instanceof TransientError));
    assert.ok(Date.now() - t0 < 10000);
  }
  const w = new Worker({ connectionString: 'host=127.0.0.1 dbname', queue, logger: quiet, handler: async () => {} });
  await assert.rejects(w.run(), TypeError);
  assert.equal(pgc.errorClass('28P01'), BadConnectionError);
  assert.ok(pgc.isFatal({ code: '3D000', message: 'database "x" does not exist' }));
});
