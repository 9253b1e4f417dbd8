'use strict';

const errors = require('./lib/errors');
const { Worker, handleSignals, defaultWorkerName } = require('./lib/worker');
const { Client } = require('./lib/client');

module.exports = { Worker, Client, handleSignals, defaultWorkerName, ...errors };
