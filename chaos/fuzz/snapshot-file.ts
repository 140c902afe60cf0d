// The snapshot-file target (`npm run fuzz -- --target snapshot`): etcd snapshot files damaged
// in the ways a file can be (bytes flipped, truncated, pages copied over others, page pointers
// and counts rewritten, meta pages rewritten with a valid checksum so the damage gets past
// them), read by the etcd snapshot reader, and some restored with `kvs snapshot restore`'s
// code into a temporary data directory. A case fails when reading throws anything but the
// reader's own errors (a TypeError or RangeError is a missing check), takes over CASE_MS, or a
// restore that failed left a data directory behind. Cases are drawn from the seed, so any can
// be replayed (`--seed N --case I`). The seeds are written by testkit/etcd-fixture.ts.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bufferSink, writeEtcdFixture } from '../../testkit/etcd-fixture.js';
import { BoltError, bufferSource, fnv64a } from '../../shared/bbolt/read.js';
import { EtcdSnapshot, EtcdSnapshotError } from '../../shared/etcd-snapshot/read.js';
import { restoreSnapshot } from '../../supervisor/snapshot-restore.js';
import { Rand } from './random.js';
import type { Failure } from './run.js';

const PAGE = 4096;
/** A case reads a file of a few dozen pages: anything near this long is a walk gone wrong. */
const CASE_MS = 5000;
/** One case in RESTORE_EVERY also runs the whole restore (a temporary data directory each). */
const RESTORE_EVERY = 25;

export interface SnapshotFuzzOptions {
  seed: number;
  durationMs?: number;
  maxCases?: number;
  only?: number[];
  log?: (line: string) => void;
}

export interface SnapshotFuzzSummary {
  seed: number;
  cases: number;
  /** Cases the reader read through, refused (its message), or restored / refused whole. */
  read: number;
  refused: number;
  restored: number;
  restoreRefused: number;
  /** The messages the reader refused with, by their first words, for a look at coverage. */
  reasons: Record<string, number>;
  failures: Failure[];
  ms: number;
}

/** The files cases start from: a small history with leases and auth, and one with a big key bucket. */
function seeds(): Buffer[] {
  const small = bufferSink();
  writeEtcdFixture(small, {
    keys: 40,
    revisions: 3,
    valueBytes: 60,
    compact: 60,
    leases: [{ id: 0x1234n, ttl: 60 }, { id: 0x7fff_ffff_ffff_fff0n, ttl: 3600 }],
    users: [{ name: Buffer.from('root'), password: Buffer.from('$2a$10$hash'), roles: ['root'], noPassword: false }],
    roles: [{ name: Buffer.from('r'), perms: [{ permType: 2, key: Buffer.from('a'), rangeEnd: Buffer.from('b') }] }],
    authEnabled: true,
    value: (i, r) => Buffer.alloc(i === 7 ? 9000 : 60, (i + r) % 251),
  });
  const branchy = bufferSink();
  writeEtcdFixture(branchy, { keys: 400, revisions: 2, valueBytes: 90 });
  return [small.buffer(), branchy.buffer()];
}

function fixMetaChecksum(b: Buffer, at: number): void {
  if (at + PAGE <= b.length) b.writeBigUInt64LE(fnv64a(b.subarray(at + 16, at + 16 + 56)), at + 16 + 56);
}

/** One damaged file, drawn from `rand`: 1 to 4 mutations of a seed. */
export function damagedFile(rand: Rand, bases: Buffer[]): { file: Buffer; what: string[] } {
  const b = Buffer.from(rand.pick(bases));
  const pages = b.length / PAGE;
  const what: string[] = [];
  const page = () => rand.int(pages);
  for (let n = rand.range(1, 4); n > 0; n--) {
    const kind = rand.weighted([
      [4, 'flip'],
      [1, 'truncate'],
      [2, 'copy-page'],
      [1, 'zero-page'],
      [3, 'pointer'],
      [2, 'count'],
      [3, 'meta'],
      [2, 'element'],
    ] as const);
    what.push(kind);
    switch (kind) {
      case 'flip':
        for (let i = rand.range(1, 8); i > 0; i--) b[rand.int(b.length)] ^= 1 << rand.int(8);
        break;
      case 'truncate':
        return { file: b.subarray(0, rand.int(b.length)), what };
      case 'copy-page': {
        const from = page() * PAGE;
        b.copy(b, page() * PAGE, from, Math.min(b.length, from + PAGE));
        break;
      }
      case 'zero-page':
        b.fill(0, page() * PAGE, Math.min(b.length, page() * PAGE + PAGE));
        break;
      case 'pointer': {
        // A branch element's child, or a bucket header's root: another page, itself, or far out.
        const p = rand.range(2, pages - 1);
        const el = p * PAGE + 16 + rand.int(8) * 16;
        const value = rand.pick([BigInt(rand.int(pages)), BigInt(p), BigInt(pages + rand.int(100)), 0xffff_ffff_ffff_ffffn, 1n]);
        if (el + 16 <= b.length) b.writeBigUInt64LE(value, el + 8);
        break;
      }
      case 'count': {
        const p = rand.range(2, pages - 1);
        b.writeUInt16LE(rand.pick([0, 1, 0xffff, rand.int(0x10000)]), p * PAGE + 10);
        if (rand.chance(0.3)) b.writeUInt32LE(rand.pick([1, 0xffffffff, rand.int(50)]), p * PAGE + 12);
        break;
      }
      case 'meta': {
        // A meta field rewritten and the checksum made right again, on one or both meta pages.
        const field = rand.pick([8, 12, 16, 24, 32, 40, 48]);
        const value = rand.pick([0n, 1n, 2n, BigInt(pages), BigInt(pages - 1), BigInt(rand.int(pages)), 0xffff_ffff_ffff_ffffn, BigInt(rand.int(1 << 20))]);
        for (const m of rand.chance(0.5) ? [0, PAGE] : [rand.pick([0, PAGE])]) {
          if (field === 8 || field === 12) b.writeUInt32LE(Number(value & 0xffffffffn), m + 16 + field);
          else b.writeBigUInt64LE(value, m + 16 + field);
          fixMetaChecksum(b, m);
        }
        break;
      }
      case 'element': {
        // A leaf or branch element's offsets and sizes.
        const p = rand.range(2, pages - 1);
        const el = p * PAGE + 16 + rand.int(6) * 16;
        if (el + 16 <= b.length) b.writeUInt32LE(rand.pick([0, 1, 0xffffffff, rand.int(PAGE * 2), 0x7fffffff]), el + rand.pick([0, 4, 8, 12]));
        break;
      }
    }
  }
  return { file: b, what };
}

/** Reads all of it, as a restore does; returns the refusal message, or undefined when it read through. */
function readAll(file: Buffer): string | undefined {
  try {
    const snap = new EtcdSnapshot(bufferSource(file));
    snap.compaction();
    snap.leases();
    snap.auth();
    snap.unknownBuckets();
    for (const page of snap.changes()) void page;
    return undefined;
  } catch (err) {
    if (err instanceof EtcdSnapshotError || err instanceof BoltError) return err.message;
    throw err;
  }
}

export async function fuzzSnapshots(opts: SnapshotFuzzOptions): Promise<SnapshotFuzzSummary> {
  const start = Date.now();
  const bases = seeds();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-fuzz-snapshot-'));
  const s: SnapshotFuzzSummary = { seed: opts.seed, cases: 0, read: 0, refused: 0, restored: 0, restoreRefused: 0, reasons: {}, failures: [], ms: 0 };
  try {
    const indices = opts.only ?? (function* () {
      for (let i = 0; ; i++) yield i;
    })();
    for (const index of indices) {
      if (!opts.only && opts.maxCases !== undefined && s.cases >= opts.maxCases) break;
      if (!opts.only && opts.durationMs !== undefined && Date.now() - start >= opts.durationMs) break;
      s.cases++;
      const { file, what } = damagedFile(Rand.forCase(opts.seed, index), bases);
      const t0 = Date.now();
      try {
        const refused = readAll(file);
        if (refused === undefined) s.read++;
        else {
          s.refused++;
          const reason = refused.replace(/\d+/g, 'N').split(/[:(]/)[0]!.slice(0, 60);
          s.reasons[reason] = (s.reasons[reason] ?? 0) + 1;
        }
      } catch (err) {
        s.failures.push({ cases: [index], what: `reading a file damaged by ${what.join(', ')} threw ${(err as Error).stack}` });
        continue;
      }
      if (Date.now() - t0 > CASE_MS) s.failures.push({ cases: [index], what: `reading a file damaged by ${what.join(', ')} took ${Date.now() - t0} ms` });
      if (index % RESTORE_EVERY === 0 || opts.only) {
        const f = path.join(dir, `case-${index}.db`);
        const target = path.join(dir, `case-${index}`);
        fs.writeFileSync(f, file);
        try {
          await restoreSnapshot({ file: f, dataDir: target, skipHashCheck: true });
          s.restored++;
        } catch (err) {
          s.restoreRefused++;
          if (fs.existsSync(target)) s.failures.push({ cases: [index], what: `a refused restore left ${target} behind (${(err as Error).message})` });
          if (!/cannot be restored|is not a snapshot kvs reads|is not a kvs snapshot|layout version/.test((err as Error).message)) {
            s.failures.push({ cases: [index], what: `restore failed without naming the problem: ${(err as Error).stack}` });
          }
        } finally {
          fs.rmSync(target, { recursive: true, force: true });
          fs.rmSync(f, { force: true });
        }
      }
      if (s.cases % 500 === 0) opts.log?.(`fuzz snapshot: ${s.cases} cases, ${s.failures.length} failures`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  s.ms = Date.now() - start;
  return s;
}

export function snapshotSummaryLine(s: SnapshotFuzzSummary): string {
  return (
    `fuzz snapshot: seed ${s.seed}, ${s.cases} cases in ${(s.ms / 1000).toFixed(1)} s; ` +
    `read through ${s.read}, refused ${s.refused}; restored ${s.restored}, restore refused ${s.restoreRefused}; failures ${s.failures.length}` +
    s.failures.map((f) => `\n  FAILED: ${f.what} (replay: --target snapshot --seed ${s.seed} --case ${f.cases.join(',')})`).join('')
  );
}
