// The folders are the process boundaries: each service under services/ is its own process and
// talks to the others over gRPC, so it may import only shared/ and its own folder; production
// (services/, shared/, supervisor/, bin/) never imports test or tool code; and the tools stand
// on testkit/, never on each other. This test reads every source file's relative imports and
// fails on one that crosses a line, naming the file, the import and the rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { imports, importedPath, sourceFiles, type SourceFile } from '../testkit/imports.js';

const TOP = ['bin', 'services', 'shared', 'supervisor', 'embed', 'testkit', 'bench', 'chaos', 'integration'] as const;
type Top = (typeof TOP)[number];

/** What each top folder may import besides itself (a service: besides its own folder). */
const MAY_IMPORT: Record<Top, readonly Top[]> = {
  shared: [],
  services: ['shared'],
  supervisor: ['shared', 'services'],
  // The embedding API composes the services' libraries in the caller's process, as the supervisor composes their processes.
  embed: ['shared', 'services'],
  bin: ['shared', 'supervisor'],
  testkit: ['shared', 'services', 'supervisor', 'embed'],
  bench: ['testkit', 'shared', 'services', 'supervisor', 'embed'],
  chaos: ['testkit', 'shared', 'services', 'supervisor', 'embed'],
  integration: ['chaos', 'testkit', 'shared', 'services', 'supervisor', 'embed'],
};
/** A unit test beside production source may stand on the test kit as well. */
const UNIT_TEST_MAY_ALSO: readonly Top[] = ['testkit'];

interface Place {
  top: Top;
  /** services/<name> for a file of a service, else the top folder. */
  unit: string;
}

/** Entries in bin/ that start a tool, not kvs: they belong to that tool's folder. */
const TOOL_ENTRIES: Record<string, Top> = { 'bin/kvs-bench.js': 'bench' };

function placeOf(rel: string): Place | undefined {
  const tool = TOOL_ENTRIES[rel];
  if (tool) return { top: tool, unit: tool };
  const parts = rel.split('/');
  const top = TOP.find((t) => t === parts[0]);
  if (!top) return undefined;
  return { top, unit: top === 'services' && parts.length > 2 ? `services/${parts[1]}` : top };
}

interface Crossing {
  file: string;
  imports: string;
  rule: string;
}

/** Every import of a file in `files` (repository-relative) that the layering refuses. */
function crossings(files: readonly SourceFile[]): Crossing[] {
  const out: Crossing[] = [];
  for (const { rel, src } of files) {
    const from = placeOf(rel);
    if (!from) continue;
    const unitTest = rel.endsWith('.test.ts') && ['services', 'shared', 'supervisor', 'embed'].includes(from.top);
    for (const { spec } of imports(src)) {
      if (!spec.startsWith('.')) continue;
      const target = importedPath(rel, spec);
      const to = placeOf(target);
      if (!to) continue;
      if (to.unit === from.unit) continue;
      if (from.top === 'services' && to.top === 'services') {
        out.push({ file: rel, imports: target, rule: `${from.unit} imports only shared/ and its own folder, not ${to.unit} (another process: talk to it over its gRPC protocol, or move the contract to shared/)` });
        continue;
      }
      if (to.top === from.top) continue;
      const allowed = MAY_IMPORT[from.top].includes(to.top) || (unitTest && UNIT_TEST_MAY_ALSO.includes(to.top));
      if (!allowed) out.push({ file: rel, imports: target, rule: `${from.top}/ may import ${[...MAY_IMPORT[from.top], ...(unitTest ? UNIT_TEST_MAY_ALSO : [])].map((t) => `${t}/`).join(', ') || 'only itself'}, not ${to.top}/` });
    }
  }
  return out;
}

test('no import crosses a process boundary or runs back up from production into test and tool code', () => {
  const files = sourceFiles(TOP);
  assert.ok(files.some((f) => f.rel === 'services/storage/engine.ts'), 'no sources found');
  const found = crossings(files);
  assert.deepEqual(found, [], found.map((c) => `${c.file} imports ${c.imports}: ${c.rule}`).join('\n'));
});

/** The groups of files that import each other in a circle (type-only imports too), each sorted. */
function circles(files: readonly SourceFile[]): string[][] {
  const known = new Set(files.map((f) => f.rel));
  const next = new Map(files.map((f) => [f.rel, imports(f.src).filter((i) => i.spec.startsWith('.')).map((i) => importedPath(f.rel, i.spec)).filter((t) => known.has(t))]));
  // Tarjan's strongly connected components.
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v)!) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) out.push(group.sort());
    }
  };
  for (const f of files) if (!index.has(f.rel)) visit(f.rel);
  return out;
}

test('no files import each other in a circle', () => {
  assert.deepEqual(circles(sourceFiles(TOP)), []);
  const q = (spec: string) => 'import type { T } from @;'.replace('@', `'${spec}'`);
  assert.deepEqual(circles([{ rel: 'shared/a.ts', src: q('./b.js') }, { rel: 'shared/b.ts', src: q('./c.js') }, { rel: 'shared/c.ts', src: q('./a.js') }, { rel: 'shared/d.ts', src: q('./a.js') }]), [['shared/a.ts', 'shared/b.ts', 'shared/c.ts']]);
});

/** A line of source importing `spec`: written with `@` for the quoted specifier, so that this file itself holds no such import. */
const line = (form: string, spec: string): string => form.replace('@', `'${spec}'`);
const one = (rel: string, form: string, spec: string): Crossing[] => crossings([{ rel, src: line(form, spec) }]);

test('the check sees static, type-only, re-exported, dynamic and side-effect imports, and allows what the layering allows', () => {
  for (const form of ['import { Op } from @;', 'import type { Op } from @;', 'export { Op } from @;', 'const m = await import(@);', 'import @;', 'import {\n  a,\n  b,\n} from @;']) {
    assert.equal(one('services/gateway/x.ts', form, '../storage/engine.js').length, 1, form);
  }
  assert.deepEqual(one('services/gateway/x.ts', 'import { x } from @;', '../../shared/log.js'), []);
  assert.deepEqual(one('services/gateway/x.ts', 'import { y } from @;', './kv.js'), []);
  assert.deepEqual(one('services/gateway/x.ts', 'import z from @;', 'node:fs'), []);
  assert.equal(one('supervisor/cli.ts', 'await import(@);', '../bench/main.js').length, 1);
  assert.equal(one('shared/x.ts', 'import { h } from @;', '../testkit/harness.js').length, 1);
  assert.deepEqual(one('shared/x.test.ts', 'import { h } from @;', '../testkit/harness.js'), []);
  assert.equal(one('shared/x.test.ts', 'import { s } from @;', '../services/storage/engine.js').length, 1);
  assert.equal(one('bench/x.ts', 'import { h } from @;', '../integration/harness.js').length, 1);
  assert.equal(one('chaos/x.ts', 'import { k } from @;', '../bench/kv-client.js').length, 1);
  assert.deepEqual(one('chaos/x.ts', 'import { k } from @;', '../testkit/kv-client.js'), []);
  assert.equal(one('testkit/x.ts', 'import { d } from @;', '../integration/differential.js').length, 1);
  assert.equal(one('bin/kvs.js', 'await import(@);', '../dist/bench/main.js').length, 1);
  assert.deepEqual(one('bin/kvs.js', 'await import(@);', '../dist/supervisor/cli.js'), []);
  assert.deepEqual(one('bin/kvs-bench.js', 'await import(@);', '../dist/bench/main.js'), []);
  assert.deepEqual(one('embed/x.ts', 'import { e } from @;', '../services/storage/engine.js'), []);
  assert.equal(one('embed/x.ts', 'import { s } from @;', '../supervisor/cli.js').length, 1);
  assert.equal(one('embed/x.ts', 'import { h } from @;', '../testkit/harness.js').length, 1);
  assert.equal(one('services/storage/x.ts', 'import { o } from @;', '../../embed/open.js').length, 1);
  assert.equal(one('shared/x.ts', 'import { o } from @;', '../embed/open.js').length, 1);
});
