'use strict';
// Run by test/t/142_spread.pl (not a node --test file): keys on stdin, one a
// line; prints route_hash, the partition of P = 4, spread_partition over
// [1, 3] and over [0, 1, 2], as the front's functions give them.
const { routeHash, spreadPartition } = require('../lib/routing');

const keys = require('fs').readFileSync(0).toString('utf8').split('\n').slice(0, -1);
process.stdout.write(keys.map((k) => [routeHash(k), routeHash(k) & 3, spreadPartition([1, 3], k),
  spreadPartition([0, 1, 2], k)].join(' ') + '\n').join(''));
