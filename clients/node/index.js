'use strict';

const errors = require('./lib/errors');
const { Worker, handleSignals, defaultWorkerName } = require('./lib/worker');
const { Client } = require('./lib/client');
const { durable, Durable, DurableContext, Suspended } = require('./lib/durable');
const { PartitionedClient, PartitionUnreachableError, routeHash, tokenPartition, spreadPartition } = require('./lib/routing');

module.exports = {
  Worker, Client, handleSignals, defaultWorkerName, ...errors,
  PartitionedClient, PartitionUnreachableError, routeHash, tokenPartition, spreadPartition,
  durable, Durable, DurableContext, Suspended,
};
