#!/usr/bin/env node
// Thin launcher: the CLI is compiled from supervisor/cli.ts by `npm install` (prepare) or `npm run build`.
import '../dist/supervisor/cli.js';
