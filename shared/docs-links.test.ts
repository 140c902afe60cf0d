// Every reference to a page of docs/ must name a file and a heading that exist: `docs/X.md` and
// `docs/X.md#anchor` in code comments and docs (resolved from the repository's root), and the
// relative links of the Markdown pages themselves (`[text](cluster.md#anchor)`,
// `[text](#anchor)`, `[text](../README.md)`), resolved from the page. Anchors are GitHub's:
// the heading's text lowercased, punctuation dropped, each space a hyphen, `-1`, `-2`, ... for
// repeats. Reads the sources, not dist/, so it runs from the compiled test as from the tree.
// And the index, docs/README.md, must name every page under docs/.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', '.bench', '.dl']);
/** This file names broken links on purpose, for its own test. */
const SELF = 'shared/docs-links.test.ts';
const SOURCE = /\.(ts|md|go)$/;

/** GitHub's anchor for a heading's text. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a Markdown text defines: its headings (outside code fences), and `<a id|name>`. */
function anchors(markdown: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    const f = /^\s*(```+|~~~+)/.exec(line);
    if (f) {
      if (fence === undefined) fence = f[1]![0];
      else if (f[1]![0] === fence) fence = undefined;
      continue;
    }
    if (fence !== undefined) continue;
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      // Links in a heading count by their text.
      const base = slug(h[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1'));
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      out.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(a[1]!);
  }
  return out;
}

interface Ref {
  /** The file the reference is in, relative to the root. */
  from: string;
  line: number;
  /** What it names, as written. */
  text: string;
  /** The file it names, relative to the root, and the anchor (without '#'), if any. */
  file: string;
  anchor?: string;
}

/** `docs/….md(#anchor)` anywhere in a file, resolved from the root. */
const ROOTED = /(?<![\w./-])docs\/[\w./-]*?\.md(?:#[\w-]+)?/g;
/** A Markdown link's target: `](target)` or `](target "title")`. */
const MD_LINK = /\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g;

function references(rel: string, text: string): Ref[] {
  const refs: Ref[] = [];
  const lines = text.split('\n');
  const isMd = rel.endsWith('.md');
  lines.forEach((line, i) => {
    for (const m of line.matchAll(ROOTED)) {
      const [file, anchor] = m[0].split('#') as [string, string | undefined];
      refs.push({ from: rel, line: i + 1, text: m[0], file, anchor });
    }
    if (!isMd) return;
    for (const m of line.matchAll(MD_LINK)) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      const [p, anchor] = target.split('#') as [string, string | undefined];
      const file = p === '' ? rel : path.posix.normalize(path.posix.join(path.posix.dirname(rel), decodeURI(p)));
      refs.push({ from: rel, line: i + 1, text: target, file, anchor });
    }
  });
  return refs;
}

/** Every reference under `root` that names a missing file or heading, one line each. */
function brokenLinks(root: string): string[] {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = dir === '' ? e.name : `${dir}/${e.name}`;
      if (e.isDirectory()) {
        if (!SKIP_DIRS.has(e.name)) walk(rel);
      } else if (SOURCE.test(e.name) && rel !== SELF) files.push(rel);
    }
  };
  walk('');
  const anchorCache = new Map<string, Set<string>>();
  const anchorsOf = (file: string): Set<string> => {
    let a = anchorCache.get(file);
    if (!a) anchorCache.set(file, (a = anchors(fs.readFileSync(path.join(root, file), 'utf8'))));
    return a;
  };
  const broken: string[] = [];
  for (const rel of files) {
    for (const r of references(rel, fs.readFileSync(path.join(root, rel), 'utf8'))) {
      const where = `${r.from}:${r.line}: ${r.text}`;
      if (r.file.startsWith('..') || !fs.existsSync(path.join(root, r.file))) {
        broken.push(`${where}: no file ${r.file}`);
      } else if (r.anchor !== undefined && r.file.endsWith('.md') && !anchorsOf(r.file).has(r.anchor)) {
        broken.push(`${where}: ${r.file} has no heading #${r.anchor}`);
      }
    }
  }
  return broken;
}

test('anchors are GitHub\'s', () => {
  assert.equal(slug('Storage layout (LMDB, `shared/mvcc/schema.ts`)'), 'storage-layout-lmdb-sharedmvccschemats');
  assert.equal(slug("What is left is the design's (2026-11-28 night)"), 'what-is-left-is-the-designs-2026-11-28-night');
  assert.equal(slug('Smoke run — noisy machine'), 'smoke-run--noisy-machine');
  assert.equal(slug('Under a service manager (systemd)'), 'under-a-service-manager-systemd');
  const a = anchors('# Top\n## Results\n```sh\n# not a heading\n```\n### Results\n## [Linked](x.md) title\n<a id="custom"></a>\n');
  assert.deepEqual([...a].sort(), ['custom', 'linked-title', 'results', 'results-1', 'top']);
});

test('a missing page or heading is reported, with where it is named', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-docs-links-'));
  try {
    fs.mkdirSync(path.join(dir, 'docs', 'perf'), { recursive: true });
    fs.mkdirSync(path.join(dir, 'services'));
    fs.writeFileSync(path.join(dir, 'docs', 'a.md'), '# A\n\n## Here it is\n\n[ok](#here-it-is) [bad](#gone) [up](perf/b.md#b)\n');
    fs.writeFileSync(path.join(dir, 'docs', 'perf', 'b.md'), '# B\n\n[back](../a.md#here-it-is) [nowhere](../c.md)\n');
    fs.writeFileSync(
      path.join(dir, 'services', 'x.ts'),
      '// see docs/a.md#here-it-is and docs/a.md, not docs/a.md#missing\n// nor docs/perf/none.md\n',
    );
    assert.deepEqual(brokenLinks(dir).sort(), [
      'docs/a.md:5: #gone: docs/a.md has no heading #gone',
      'docs/perf/b.md:3: ../c.md: no file docs/c.md',
      'services/x.ts:1: docs/a.md#missing: docs/a.md has no heading #missing',
      'services/x.ts:2: docs/perf/none.md: no file docs/perf/none.md',
    ]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('every docs link in the repository names a page and a heading that exist', () => {
  const broken = brokenLinks(ROOT);
  assert.ok(broken.length === 0, `${broken.length} broken links to docs (fix the link or the heading):\n${broken.join('\n')}`);
});

test('the index, docs/README.md, names every page under docs/', () => {
  const index = fs.readFileSync(path.join(ROOT, 'docs', 'README.md'), 'utf8');
  const linked = new Set(references('docs/README.md', index).map((r) => r.file));
  const pages: string[] = [];
  const walk = (dir: string): void => {
    for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = `${dir}/${e.name}`;
      if (e.isDirectory()) walk(rel);
      else if (e.name.endsWith('.md') && rel !== 'docs/README.md') pages.push(rel);
    }
  };
  walk('docs');
  const missing = pages.filter((p) => !linked.has(p)).sort();
  assert.deepEqual(missing, [], `docs/README.md lists no line for: ${missing.join(', ')}`);
});
