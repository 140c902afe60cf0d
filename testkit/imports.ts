// The imports of the repository's source files, read as text (a regular expression per import
// form: TypeScript's own parser is not a library in tsc 7). Used by the checks that hold the
// layering: shared/boundaries.test.ts and bench/shipped.test.ts.
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './process.js';

const STATIC = /\b(?:import|export)\s+(type\s+)?[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/g; // import/export ... from
const DYNAMIC = /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g; // import('...')
const BARE = /^\s*import\s*['"]([^'"]+)['"]/gm; // import '...' (for its side effects)

export interface Import {
  spec: string;
  /** `import type` / `export type`: erased by the compiler, loads nothing at run time. */
  typeOnly: boolean;
}

/** The imports of `src`. */
export function imports(src: string): Import[] {
  return [
    ...[...src.matchAll(STATIC)].map((m) => ({ spec: m[2]!, typeOnly: m[1] !== undefined })),
    ...[...src.matchAll(DYNAMIC)].map((m) => ({ spec: m[1]!, typeOnly: false })),
    ...[...src.matchAll(BARE)].map((m) => ({ spec: m[1]!, typeOnly: false })),
  ];
}

/** The repository-relative source path (`.ts`) a relative import names; bin/ loads the compiled dist/ tree. */
export function importedPath(fromRel: string, spec: string): string {
  let rel = path.posix.normalize(path.posix.join(path.posix.dirname(fromRel), spec));
  if (rel.startsWith('dist/')) rel = rel.slice('dist/'.length);
  return rel.replace(/\.js$/, '.ts');
}

/** The package an import names (`@scope/name`, `name`), or `node:x` for a builtin; undefined for a relative one. */
export function packageOf(spec: string): string | undefined {
  if (spec.startsWith('.')) return undefined;
  if (spec.startsWith('node:')) return spec;
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

export interface SourceFile {
  /** Repository-relative, with '/' separators. */
  rel: string;
  src: string;
}

/** The TypeScript sources (and bin/'s JavaScript launchers) under the repository's `folders`. */
export function sourceFiles(folders: readonly string[], root = REPO_ROOT): SourceFile[] {
  const out: SourceFile[] = [];
  const walk = (dir: string, js: boolean): void => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'node_modules') walk(p, js);
      } else if ((e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) || (js && e.name.endsWith('.js'))) {
        out.push({ rel: path.relative(root, p).split(path.sep).join('/'), src: fs.readFileSync(p, 'utf8') });
      }
    }
  };
  for (const f of folders) if (fs.existsSync(path.join(root, f))) walk(path.join(root, f), f === 'bin');
  return out;
}

/** The files `entries` load at run time, they included: relative imports (static and dynamic, not type-only) followed through `files`. */
export function importClosure(files: readonly SourceFile[], entries: readonly string[]): SourceFile[] {
  const byPath = new Map(files.map((f) => [f.rel, f]));
  const seen = new Map<string, SourceFile>();
  const queue = [...entries];
  while (queue.length > 0) {
    const rel = queue.pop()!;
    const f = byPath.get(rel);
    if (!f || seen.has(rel)) continue;
    seen.set(rel, f);
    for (const i of imports(f.src)) if (!i.typeOnly && i.spec.startsWith('.')) queue.push(importedPath(rel, i.spec));
  }
  return [...seen.values()];
}
