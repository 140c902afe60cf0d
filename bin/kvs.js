#!/usr/bin/env node
// Thin launcher: the CLI is compiled from supervisor/cli.ts by `npm install` (prepare) or `npm run build`.
// A component under `kvs run` ignores the signals its supervisor orders the stop for from its
// first moment (shared/component.ts guardSignals), not only once the CLI has loaded.
if (process.argv[2] === 'component') (await import('../dist/shared/component.js')).guardSignals();
await import('../dist/supervisor/cli.js');
