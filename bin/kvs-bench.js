#!/usr/bin/env node
// The benchmark (docs/benchmarks.md), compiled from bench/main.ts by `npm install` (prepare) or
// `npm run build`. An entry of its own so that `kvs` loads no tool code: `kvs bench` runs this.
await import('../dist/bench/main.js');
