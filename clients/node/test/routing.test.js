'use strict';

// lib/routing.js without a server: the hash, the token bits and the spread
// placement that the front (pg_claim_proxy) uses. TAP test/t/142_spread.pl
// checks them against the front's own functions over 2,004 keys.

const test = require('node:test');
const assert = require('node:assert/strict');
const { routeHash, tokenPartition, spreadPartition, PartitionedClient } = require('..');

test('routeHash is FNV-1a of the UTF-8 bytes, as an int4', () => {
  assert.equal(routeHash('a'), 0xe40c292c - 2 ** 32);
  assert.equal(routeHash(''), 2166136261 - 2 ** 32);
  assert.equal(routeHash(null), 0);
  for (let i = 0; i < 1000; i++) {
    const h = routeHash(`k${i}`);
    assert.ok(h >= -(2 ** 31) && h < 2 ** 31);
  }
});

test('tokenPartition reads bits 52..47 (62..53 above 2^53 - 1)', () => {
  assert.equal(tokenPartition(5), 0);
  assert.equal(tokenPartition(3n * 2n ** 47n + 12n), 3);
  assert.equal(tokenPartition('9007199254740991'), 63);
  assert.equal(tokenPartition(5n * 2n ** 53n + 1n), 5);
  assert.equal(tokenPartition(-1), -1);
});

test('spreadPartition over all partitions is the partition of the key', () => {
  for (let i = 0; i < 500; i++) {
    const key = `group-${i}`;
    assert.equal(spreadPartition([0, 1, 2, 3], key), routeHash(key) & 3);
    assert.ok([1, 3].includes(spreadPartition([1, 3], key)));
  }
});

test('partitions must be a power of two', () => {
  assert.throws(() => new PartitionedClient({ partitions: ['a', 'b', 'c'] }), TypeError);
});
