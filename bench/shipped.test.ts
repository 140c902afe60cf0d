// `kvs bench` (bin/kvs-bench.js) runs from the installed package, where devDependencies are
// absent and tests do not run: nothing it loads may need a test runner, an assertion library,
// a devDependency or a test-only helper. Read from the sources, so that it holds for every flag
// (a workload's code loads only when that workload runs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../testkit/process.js';
import { importClosure, imports, packageOf, sourceFiles } from '../testkit/imports.js';

const NOT_AT_RUN_TIME = ['node:test', 'node:assert', 'node:assert/strict'];

test('the benchmark loads no test runner, assertion library, devDependency or test-only helper', () => {
  const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string>; bin: Record<string, string> };
  assert.equal(pkg.bin['kvs-bench'], 'bin/kvs-bench.js');
  const files = sourceFiles(['bin', 'bench', 'testkit', 'shared', 'services', 'supervisor', 'embed']);
  const entries = ['bin/kvs-bench.js', ...files.filter((f) => f.rel.startsWith('bench/') && !f.rel.endsWith('.test.ts')).map((f) => f.rel)];
  const loaded = importClosure(files, entries);
  assert.ok(loaded.some((f) => f.rel === 'bench/main.ts') && loaded.some((f) => f.rel === 'testkit/s3-server.ts'), 'the closure follows bin/ into bench/ and testkit/');
  const problems: string[] = [];
  for (const f of loaded) {
    if (f.rel.endsWith('.test.ts') || /^(integration|chaos)\//.test(f.rel)) problems.push(`${f.rel} is loaded`);
    for (const i of imports(f.src)) {
      const p = packageOf(i.spec);
      if (i.typeOnly || p === undefined) continue;
      if (NOT_AT_RUN_TIME.includes(i.spec) || p in pkg.devDependencies) problems.push(`${f.rel} imports ${i.spec}`);
    }
  }
  assert.deepEqual(problems, []);
});
