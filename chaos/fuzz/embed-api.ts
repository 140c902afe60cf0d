// The embedding API's target (`npm run fuzz -- --target embed`): random sequences of the Node's
// operations on one embedded node, with keys that collide and share prefixes, compare-and-swap
// tokens right and wrong, txns, and bad input (empty, over-long and mistyped keys, oversized
// values), each checked against a model of etcd's semantics (revisions, versions, what exists).
// A case fails when an answer differs from the model's, when a call rejects with anything but
// the API's own errors (KvsError subclasses; TypeError for a mistyped argument), or when the
// node's whole contents differ from the model's after the case. Cases are drawn from the seed,
// so any can be replayed (`--seed N --case I`); a replay runs the cases before it too, as the
// node's state is theirs.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { open, KvsError, ErrKeyExists, ErrRevisionMismatch, ErrInvalidArgument, type Node, type KeyValue } from '../../embed/index.js';
import { MAX_KEY_BYTES } from '../../shared/mvcc/schema.js';
import { Rand } from './random.js';
import type { Failure } from './run.js';

const OPS_PER_CASE = 25;
const KEYS = ['a', 'ab', 'a/x', 'a/y', 'b', 'b/1', '\u00e9', 'z'].map((k) => Buffer.from(k));
KEYS.push(Buffer.from([0xff]), Buffer.from([0xff, 0x00]), Buffer.from([0x01, 0x02]));
const PREFIXES = ['', 'a', 'a/', 'b', '\u00e9', 'zz'].map((k) => Buffer.from(k)).concat([Buffer.from([0xff])]);
/** One byte past LMDB's key limit. */
const LONG_KEY = Buffer.alloc(MAX_KEY_BYTES + 1, 0x6b);

interface Entry {
  value: Buffer;
  createRevision: number;
  modRevision: number;
  version: number;
}

/** etcd's semantics for one node, as far as the fuzzer's operations reach. */
class Model {
  readonly keys = new Map<string, Entry>();
  revision: number;
  constructor(revision: number) {
    this.revision = revision;
  }
  get(k: Buffer): Entry | undefined {
    return this.keys.get(k.toString('hex'));
  }
  put(k: Buffer, value: Buffer, rev = ++this.revision): void {
    const prev = this.get(k);
    this.keys.set(k.toString('hex'), { value, createRevision: prev?.createRevision ?? rev, modRevision: rev, version: (prev?.version ?? 0) + 1 });
  }
  delete(k: Buffer): boolean {
    return this.keys.delete(k.toString('hex'));
  }
  /** The keys starting with `prefix`, in byte order. */
  list(prefix: Buffer): [Buffer, Entry][] {
    return [...this.keys]
      .map(([h, e]) => [Buffer.from(h, 'hex'), e] as [Buffer, Entry])
      .filter(([k]) => k.subarray(0, prefix.length).equals(prefix))
      .sort(([a], [b]) => Buffer.compare(a, b));
  }
}

export interface EmbedFuzzOptions {
  seed: number;
  durationMs?: number;
  maxCases?: number;
  /** Replay through the highest of these (the cases before it built the node's state). */
  only?: number[];
  log?: (line: string) => void;
}

export interface EmbedFuzzSummary {
  seed: number;
  cases: number;
  ops: number;
  /** Calls refused with the API's errors, by class. */
  refused: Record<string, number>;
  failures: Failure[];
  ms: number;
}

const describe = (kv: KeyValue | Entry | undefined) => (kv ? `${kv.value.toString('hex')}@c${kv.createRevision}/m${kv.modRevision}/v${kv.version}` : 'absent');

export async function fuzzEmbedded(opts: EmbedFuzzOptions): Promise<EmbedFuzzSummary> {
  const start = Date.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-fuzz-embed-'));
  const s: EmbedFuzzSummary = { seed: opts.seed, cases: 0, ops: 0, refused: {}, failures: [], ms: 0 };
  const node = await open({ dataDir: dir });
  try {
    const model = new Model(node.currentRevision());
    const last = opts.only ? Math.max(...opts.only) : Infinity;
    for (let index = 0; index <= last; index++) {
      if (!opts.only && opts.maxCases !== undefined && s.cases >= opts.maxCases) break;
      if (!opts.only && opts.durationMs !== undefined && Date.now() - start >= opts.durationMs) break;
      s.cases++;
      const rand = Rand.forCase(opts.seed, index);
      const fail = (what: string) => s.failures.push({ cases: [index], what });
      for (let i = 0; i < OPS_PER_CASE; i++) {
        s.ops++;
        try {
          await step(node, model, rand, fail);
        } catch (err) {
          if (err instanceof KvsError || err instanceof TypeError) s.refused[err.name] = (s.refused[err.name] ?? 0) + 1;
          else fail(`a call threw ${(err as Error).stack}`);
        }
      }
      const all = await node.list('');
      const want = model.list(Buffer.alloc(0));
      const got = all.kvs.map((kv) => `${kv.key.toString('hex')}=${describe(kv)}`).join(' ');
      const expected = want.map(([k, e]) => `${k.toString('hex')}=${describe(e)}`).join(' ');
      if (got !== expected || all.revision !== model.revision) fail(`after the case the node holds [${got}] at revision ${all.revision}, the model [${expected}] at ${model.revision}`);
      if (s.failures.length) break; // later cases would only report the same divergence
      if (s.cases % 200 === 0) opts.log?.(`fuzz embed: ${s.cases} cases, ${s.ops} operations`);
    }
  } finally {
    await node.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  s.ms = Date.now() - start;
  return s;
}

/** One random operation, its answer checked against the model; refusals the model expects are rethrown. */
async function step(node: Node, m: Model, r: Rand, fail: (what: string) => void): Promise<void> {
  const key = () => r.pick(KEYS);
  const val = () => r.bytes(r.int(20));
  const expectRefusal = async (what: string, call: () => Promise<unknown>, kind: new (...a: never[]) => Error) => {
    try {
      await call();
    } catch (err) {
      if (err instanceof kind) throw err;
      return fail(`${what}: expected ${kind.name}, got ${(err as Error).stack}`);
    }
    fail(`${what}: expected ${kind.name}, it succeeded`);
  };
  switch (r.weighted([[4, 'put'], [2, 'create'], [3, 'update'], [2, 'delete'], [2, 'deleteIf'], [3, 'get'], [2, 'list'], [1, 'count'], [2, 'txn'], [1, 'bad']] as const)) {
    case 'put': {
      const [k, v] = [key(), val()];
      const res = await node.put(k, v);
      m.put(k, v);
      if (res.revision !== m.revision) fail(`put ${k.toString('hex')}: revision ${res.revision}, model ${m.revision}`);
      return;
    }
    case 'create': {
      const [k, v] = [key(), val()];
      const prev = m.get(k);
      if (prev) return expectRefusal(`create of existing ${k.toString('hex')}`, () => node.create(k, v), ErrKeyExists);
      const res = await node.create(k, v);
      m.put(k, v);
      if (res.revision !== m.revision) fail(`create ${k.toString('hex')}: revision ${res.revision}, model ${m.revision}`);
      return;
    }
    case 'update': {
      const [k, v] = [key(), val()];
      const actual = m.get(k)?.modRevision ?? 0;
      const expected = r.chance(0.6) ? actual : r.pick([0, actual - 1, actual + 1, m.revision]);
      if (expected !== actual) return expectRefusal(`update ${k.toString('hex')} at ${expected} (is ${actual})`, () => node.update(k, v, expected), ErrRevisionMismatch);
      const res = await node.update(k, v, expected);
      m.put(k, v);
      if (res.revision !== m.revision) fail(`update ${k.toString('hex')}: revision ${res.revision}, model ${m.revision}`);
      return;
    }
    case 'delete': {
      const k = key();
      const res = await node.delete(k);
      const existed = m.delete(k);
      if (existed) m.revision++;
      if (res.deleted !== (existed ? 1 : 0) || res.revision !== m.revision) fail(`delete ${k.toString('hex')}: ${JSON.stringify(res)}, model deleted ${existed ? 1 : 0} at ${m.revision}`);
      return;
    }
    case 'deleteIf': {
      const k = key();
      const actual = m.get(k)?.modRevision ?? 0;
      const expected = r.chance(0.6) ? actual : actual + 1;
      if (expected !== actual) return expectRefusal(`deleteIfRevision ${k.toString('hex')} at ${expected} (is ${actual})`, () => node.deleteIfRevision(k, expected), ErrRevisionMismatch);
      const res = await node.deleteIfRevision(k, expected);
      const existed = m.delete(k);
      if (existed) m.revision++;
      if (res.deleted !== (existed ? 1 : 0)) fail(`deleteIfRevision ${k.toString('hex')}: deleted ${res.deleted}, model ${existed ? 1 : 0}`);
      return;
    }
    case 'get': {
      const k = key();
      const kv = r.chance(0.5) ? await node.get(k) : await node.linearizableGet(k);
      const want = m.get(k);
      if (describe(kv) !== describe(want)) fail(`get ${k.toString('hex')}: ${describe(kv)}, model ${describe(want)}`);
      if ((await node.exists(k)) !== !!want) fail(`exists ${k.toString('hex')}: model ${!!want}`);
      return;
    }
    case 'list': {
      const p = r.pick(PREFIXES);
      const limit = r.pick([0, 1, 2, 5]);
      const res = await node.list(p, { limit });
      const want = m.list(p);
      const shown = limit ? want.slice(0, limit) : want;
      const got = res.kvs.map((kv) => kv.key.toString('hex')).join(',');
      const exp = shown.map(([k]) => k.toString('hex')).join(',');
      if (got !== exp || res.count !== want.length || res.more !== (limit > 0 && want.length > limit)) {
        fail(`list ${p.toString('hex')} limit ${limit}: [${got}] count ${res.count} more ${res.more}, model [${exp}] count ${want.length}`);
      }
      return;
    }
    case 'count': {
      const p = r.pick(PREFIXES);
      const n = await node.count(p);
      if (n !== m.list(p).length) fail(`count ${p.toString('hex')}: ${n}, model ${m.list(p).length}`);
      return;
    }
    case 'txn': {
      // Distinct keys in a branch (etcd refuses one written twice); compares on value or version.
      const keys = [...new Set(Array.from({ length: r.range(1, 4) }, key))];
      const c = keys[0]!;
      const cmpValue = r.chance(0.5) ? (m.get(c)?.value ?? Buffer.alloc(0)) : val();
      const cmpHolds = (m.get(c)?.value ?? Buffer.alloc(0)).equals(cmpValue) && !!m.get(c);
      const ops: ({ put: Buffer; value: Buffer } | { delete: Buffer })[] = keys.map((k) => (r.chance(0.7) ? { put: k, value: val() } : { delete: k }));
      const res = await node.txn({ if: [{ key: c, target: 'value', op: '==', value: cmpValue }], then: ops, else: [{ get: c }] });
      if (res.succeeded !== cmpHolds) return fail(`txn on ${c.toString('hex')}: succeeded ${res.succeeded}, model ${cmpHolds}`);
      if (!res.succeeded) return;
      let wrote = false;
      const rev = m.revision + 1;
      for (const op of ops) {
        if ('put' in op) {
          m.put(op.put, op.value, rev);
          wrote = true;
        } else if (m.delete(op.delete)) wrote = true;
      }
      if (wrote) m.revision = rev;
      if (res.revision !== m.revision) fail(`txn: revision ${res.revision}, model ${m.revision}`);
      return;
    }
    case 'bad': {
      const which = r.pick(['empty', 'long', 'type', 'value'] as const);
      if (which === 'empty') return expectRefusal('put of an empty key', () => node.put(Buffer.alloc(0), 'v'), ErrInvalidArgument);
      if (which === 'long') return expectRefusal(`put of a ${LONG_KEY.length}-byte key`, () => node.put(LONG_KEY, 'v'), ErrInvalidArgument);
      if (which === 'type') return expectRefusal('put of a number key', () => node.put(r.int(100) as unknown as string, 'v'), TypeError);
      if (r.chance(0.1)) return expectRefusal('put of a 2 MiB value', () => node.put(key(), Buffer.alloc(2 << 20)), ErrInvalidArgument);
      return;
    }
  }
}

export function embedSummaryLine(s: EmbedFuzzSummary): string {
  const refused = Object.entries(s.refused).map(([k, n]) => `${k} ${n}`).join(', ') || 'none';
  return (
    `fuzz embed: seed ${s.seed}, ${s.cases} cases (${s.ops} operations) in ${(s.ms / 1000).toFixed(1)} s; refused: ${refused}; failures ${s.failures.length}` +
    s.failures.map((f) => `\n  FAILED: ${f.what} (replay: --target embed --seed ${s.seed} --case ${f.cases.join(',')})`).join('')
  );
}
