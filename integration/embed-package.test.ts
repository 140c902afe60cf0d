// The package as a program installs it: `npm pack` makes the tarball, which goes into a fresh
// project's node_modules, and the complete program of docs/embedding.md (`import { open } from
// 'kvs'`) compiles with tsc against the shipped .d.ts (strict) and runs, twice on one directory. The tarball is unpacked where
// npm would put it; its dependencies are linked from this checkout's node_modules, because the
// npm cache here holds their tarballs but not the registry metadata an offline install of the
// tarball's version ranges needs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT, runCommand, tempDir } from '../testkit/harness.js';

/** The complete program of docs/embedding.md: the page's first ts block. */
function docsProgram(): string {
  const page = fs.readFileSync(path.join(REPO_ROOT, 'docs', 'embedding.md'), 'utf8');
  const m = /## A complete program\n+```ts\n([\s\S]*?)\n```/.exec(page);
  assert.ok(m, 'docs/embedding.md has no complete program');
  return m[1]!;
}

test('npm pack, installed in a fresh project: docs/embedding.md\'s program (import { open } from "kvs") compiles with tsc and runs', async (t) => {
  const work = await tempDir(t, 'kvs-embed-package');
  const packed = await runCommand('npm', ['pack', '--ignore-scripts', '--pack-destination', work], { timeoutMs: 120_000 });
  assert.equal(packed.exitCode, 0, packed.stderr);
  const tarball = path.join(work, packed.stdout.trim().split('\n').pop()!);
  const listing = await runCommand('tar', ['tzf', tarball]);
  const files = listing.stdout.split('\n');
  for (const f of ['package/dist/embed/index.js', 'package/dist/embed/index.d.ts', 'package/proto/etcd/etcdserverpb/rpc.proto', 'package/bin/kvs.js']) assert.ok(files.includes(f), `${f} is not in the package`);
  assert.deepEqual(files.filter((f) => /\.test\.|dist\/integration\//.test(f)), [], 'tests are not shipped');

  const project = path.join(work, 'project');
  const kvsDir = path.join(project, 'node_modules', 'kvs');
  fs.mkdirSync(kvsDir, { recursive: true });
  const unpacked = await runCommand('tar', ['xzf', tarball, '-C', kvsDir, '--strip-components=1']);
  assert.equal(unpacked.exitCode, 0, unpacked.stderr);
  const pkg = JSON.parse(fs.readFileSync(path.join(kvsDir, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  for (const dep of [...Object.keys(pkg.dependencies), '@types/node', 'typescript']) {
    const link = path.join(project, 'node_modules', dep);
    fs.mkdirSync(path.dirname(link), { recursive: true });
    fs.symlinkSync(path.join(REPO_ROOT, 'node_modules', dep), link);
  }
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'uses-kvs', private: true, type: 'module' }));
  fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions: { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, types: ['node'], outDir: 'out' }, files: ['main.ts'] }));
  fs.writeFileSync(path.join(project, 'main.ts'), docsProgram());

  const tsc = await runCommand(process.execPath, [path.join(project, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], { timeoutMs: 120_000 });
  assert.equal(tsc.exitCode, 0, tsc.stdout + tsc.stderr);
  const program = path.join(project, 'out', 'main.js');
  const first = await runCommand(process.execPath, [program, path.join(work, 'data')], { timeoutMs: 60_000 });
  assert.equal(first.exitCode, 0, first.stderr);
  assert.match(first.stdout, /^counter: 3$/m);
  assert.match(first.stdout, /^txn: queued at revision \d+$/m);
  assert.deepEqual(first.stdout.match(/^watch: put counter=\d/gm), ['watch: put counter=1', 'watch: put counter=2', 'watch: put counter=3']);
  // Run again on the same directory: it counts on from what the first run wrote.
  const second = await runCommand(process.execPath, [program, path.join(work, 'data')], { timeoutMs: 60_000 });
  assert.equal(second.exitCode, 0, second.stderr);
  assert.match(second.stdout, /^counter: 6$/m);
  assert.match(second.stdout, /^txn: already there/m);

  // A program that misuses the API does not compile: the types are real, not `any`.
  fs.writeFileSync(path.join(project, 'main.ts'), `import { open } from 'kvs';\nconst node = await open({ dataDir: 1 });\nawait node.put('k', 42);\n`);
  const wrong = await runCommand(process.execPath, [path.join(project, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], { timeoutMs: 120_000 });
  assert.notEqual(wrong.exitCode, 0);
  assert.match(wrong.stdout + wrong.stderr, /dataDir[\s\S]*number[\s\S]*string|number' is not assignable/);
});
