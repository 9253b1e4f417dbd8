// Reads every view of the extension (listed from the catalog) with
// node-postgres and its default type parsers, as an application would. Run by
// test/ops/dashboard_test.sh on a database that has a released claim, a cancelled
// item, an expired lease, a dead item and a paused queue. Environment:
//   DSN    libpq connection string (host=... port=... dbname=... user=...)
//   VIEWS  views the extension must have (at least), space-separated
// Prints one "ok <what>" or "FAIL <what>: <why>" line per check.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const pg = require('pg');   // test/ops/dashboard/node_modules, or NODE_PATH
const results = [];
const check = (what, cond, why = '') => {
  results.push(Boolean(cond));
  console.log(cond ? `ok    ${what}` : `FAIL  ${what}${why ? `: ${why}` : ''}`);
};

// node-postgres takes a libpq URI or an object: build the object from key=value.
const conf = Object.fromEntries(process.env.DSN.trim().split(/\s+/).map((kv) => kv.split('=')));
const client = new pg.Client({ host: conf.host, port: Number(conf.port), database: conf.dbname, user: conf.user });
const TIMES = new Set([1082, 1114, 1184]);   // date, timestamp, timestamptz
const INT8 = 20;

function* scalars(v) {
  if (v !== null && typeof v === 'object' && !(v instanceof Date)) {
    for (const x of Object.values(v)) yield* scalars(x);
  } else {
    yield v;
  }
}

try {
  await client.connect();
  const views = (await client.query(
    `SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_depend d
       ON d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
     JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_claim'
     WHERE c.relkind IN ('v', 'm') ORDER BY 1`)).rows.map((r) => r.relname);
  const missing = process.env.VIEWS.split(/\s+/).filter((v) => v && !views.includes(v));
  check(`node-postgres: the extension's views (${views.join(' ')}) include the documented ones`,
        missing.length === 0, `missing ${missing.join(' ')}`);
  for (const view of views) {
    let res;
    try {
      res = await client.query(`SELECT * FROM claim.${view}`);
    } catch (e) {
      check(`node-postgres: SELECT * FROM claim.${view}`, false, String(e));
      continue;
    }
    const bad = [];
    for (const row of res.rows) {
      for (const f of res.fields) {
        const v = row[f.name];
        if (v === null) continue;
        if (TIMES.has(f.dataTypeID) && !(v instanceof Date && Number.isFinite(v.getTime()))) bad.push(`${f.name}=${v}`);
        if (f.dataTypeID === INT8 && !Number.isSafeInteger(Number(v))) bad.push(`${f.name}=${v}`);
        for (const s of scalars(v)) {
          if (typeof s === 'number' && !Number.isFinite(s)) bad.push(`${f.name}=${s}`);
        }
      }
      JSON.stringify(row);
    }
    check(`node-postgres: SELECT * FROM claim.${view} gives ${res.rows.length} rows of finite dates and safe integers`,
          bad.length === 0, bad.slice(0, 3).join(', '));
  }
} catch (e) {
  check('node-postgres: the run', false, String(e && e.stack || e));
} finally {
  await client.end().catch(() => {});
}
process.exit(results.every(Boolean) ? 0 : 1);
