'use strict';

// The hand-written TypeScript declarations compile against a sample of
// their use (test/types/usage.ts) under --strict. Needs the dev
// dependencies (typescript, @types/pg); no server.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');

// test/clients.sh sets PGCLAIM_NODE_DEPS=debian when npm is unreachable and
// the suite runs on Debian's node-pg: without the dev dependencies from npm
// this test is skipped, never elsewhere (a missing typescript fails it).
function missingDevDependencies() {
  if (process.env.PGCLAIM_NODE_DEPS !== 'debian') return false;
  const missing = ['typescript', '@types/pg/package.json'].filter((name) => {
    try { require.resolve(name); return false; } catch { return true; }
  });
  return missing.length
    ? `npm is unreachable: the dev dependencies (${missing.join(', ')}) are not installed`
    : false;
}

test('index.d.ts accepts the documented usage under --strict',
     { timeout: 60000, skip: missingDevDependencies() }, () => {
  const ts = require('typescript');
  const program = ts.createProgram([path.join(__dirname, 'types', 'usage.ts')], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10 || ts.ModuleResolutionKind.NodeJs,
    types: ['node'],
    skipLibCheck: false,
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${path.basename(d.file.fileName)}:${d.file.getLineAndCharacterOfPosition(d.start).line + 1}` : '';
    return `${where} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
  });
  assert.deepEqual(diagnostics, []);
});
