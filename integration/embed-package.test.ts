// The package as a program installs it: `npm pack` makes the tarball, which goes into a fresh
// project's node_modules, and a TypeScript file there that does `import { open } from 'kvs'`
// compiles with tsc against the shipped .d.ts (strict) and runs. The tarball is unpacked where
// npm would put it; its dependencies are linked from this checkout's node_modules, because the
// npm cache here holds their tarballs but not the registry metadata an offline install of the
// tarball's version ranges needs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT, runCommand, tempDir } from '../testkit/harness.js';

const PROGRAM = `
import { open, ErrKeyExists, type KeyValue, type Node } from 'kvs';

const node: Node = await open({ dataDir: process.argv[2]!, readConsistency: 'linearizable' });
await node.put('greeting', 'hello');
try {
  await node.create('greeting', 'again');
} catch (err) {
  if (!(err instanceof ErrKeyExists)) throw err;
  console.log('create refused:', err.name);
}
const kv: KeyValue | undefined = await node.get('greeting');
console.log('value:', kv?.value.toString(), 'revision:', kv?.modRevision);
await node.close();
`;

test('npm pack, installed in a fresh project: import { open } from "kvs" compiles with tsc and runs', async (t) => {
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
  fs.writeFileSync(path.join(project, 'main.ts'), PROGRAM);

  const tsc = await runCommand(process.execPath, [path.join(project, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], { timeoutMs: 120_000 });
  assert.equal(tsc.exitCode, 0, tsc.stdout + tsc.stderr);
  const ran = await runCommand(process.execPath, [path.join(project, 'out', 'main.js'), path.join(work, 'data')], { timeoutMs: 60_000 });
  assert.equal(ran.exitCode, 0, ran.stderr);
  assert.match(ran.stdout, /create refused: ErrKeyExists\nvalue: hello revision: 2\n/);

  // A program that misuses the API does not compile: the types are real, not `any`.
  fs.writeFileSync(path.join(project, 'main.ts'), `import { open } from 'kvs';\nconst node = await open({ dataDir: 1 });\nawait node.put('k', 42);\n`);
  const wrong = await runCommand(process.execPath, [path.join(project, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], { timeoutMs: 120_000 });
  assert.notEqual(wrong.exitCode, 0);
  assert.match(wrong.stdout + wrong.stderr, /dataDir[\s\S]*number[\s\S]*string|number' is not assignable/);
});
