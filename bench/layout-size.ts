// `npm run layout-size [-- flags]`: bytes per key of kvs's two big LMDB tables, `history`
// (revision -> KeyValue, appended) and `keyrevs` (key -> its changes, dupSort), loaded with a
// data set outside any server, so that layout options can be compared in seconds: LMDB's page
// size, lmdb-js's LZ4 compression of history records, the order keys arrive in, and the kind of
// values. The records are made by kvs's own encoders (shared/mvcc); group commits of 6 puts,
// as `par-put` sees (kvs_write_batch_size). Prints LMDB's page counts per table as B/key.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { open } from 'lmdb';
import { encodeKeyValue } from '../shared/mvcc/keyvalue.js';
import { HISTORY_DICTIONARY } from '../shared/mvcc/dictionary.js';
import { keyRevValue, revKey, EVENT_PUT } from '../shared/mvcc/revision.js';
import { key as benchKey, value as randomValue, DATA_AREA, jsonKey, jsonValue } from './keys.js';

const HELP = `Usage: npm run layout-size -- [flags]

Loads keys into a temporary LMDB with kvs's history and keyrevs tables and prints their size
per key (LMDB's page counts), for one combination of:

  --keys <n>          keys (default 100000)
  --values random|json
                      random: the bench's 64-byte keys and 256-byte random values (default);
                      json: Kubernetes-like keys (/registry/configmaps/<ns>/<name>) and JSON
                      objects of ~255 bytes (a ConfigMap: its metadata with a uid, a timestamp
                      and a label, and its data)
  --order slices|random|sequential
                      slices: 16 writers, each through its own contiguous range of keys
                      (as the bench's preload; default); random: keys in random order;
                      sequential: one writer, keys in ascending order (LMDB then fills
                      keyrevs' pages: it splits a page at its end only for an insert there)
  --page-size <bytes> LMDB page size (default 4096, the OS page size)
  --compress <bytes>  LZ4-compress history records above this size (lmdb-js compression;
                      default 0: off; kvs compresses above 64)
  --dictionary kvs|lmdb
                      what --compress compresses against: kvs's dictionary
                      (shared/mvcc/dictionary.ts; default) or lmdb-js's built-in one
  -h, --help          this text
`;

const BATCH = 6;
const WRITERS = 16;

export interface LayoutSize {
  keys: number;
  keyBytes: number;
  valueBytes: number;
  history: number;
  keyrevs: number;
  total: number;
}

export async function measureLayout(opts: { keys: number; values: 'random' | 'json'; order: 'slices' | 'random' | 'sequential'; pageSize: number; compress: number; dictionary?: 'kvs' | 'lmdb' }): Promise<LayoutSize> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-layout-'));
  const env = open<Buffer, Buffer>({ path: dir, mapSize: 64 * 1024 ** 3, noSync: true, pageSize: opts.pageSize, encoding: 'binary', keyEncoding: 'binary' });
  try {
    const binary = { encoding: 'binary', keyEncoding: 'binary' } as const;
    const history = env.openDB<Buffer, Buffer>({ name: 'history', ...binary, ...(opts.compress ? { compression: { threshold: opts.compress, ...(opts.dictionary === 'lmdb' ? {} : { dictionary: HISTORY_DICTIONARY }) } } : {}) });
    const keyrevs = env.openDB<Buffer, Buffer>({ name: 'keyrevs', dupSort: true, ...binary });
    const n = opts.keys;
    const keyOf = (i: number) => (opts.values === 'json' ? jsonKey(i) : benchKey(DATA_AREA, i));
    // The order: WRITERS contiguous slices interleaved at random, a random permutation, or ascending.
    const order = new Uint32Array(n);
    if (opts.order === 'sequential') {
      for (let i = 0; i < n; i++) order[i] = i;
    } else if (opts.order === 'random') {
      for (let i = 0; i < n; i++) order[i] = i;
      for (let i = n - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [order[i], order[j]] = [order[j]!, order[i]!];
      }
    } else {
      const per = Math.ceil(n / WRITERS);
      const next = Array.from({ length: WRITERS }, (_, w) => w * per);
      for (let done = 0; done < n; ) {
        const w = Math.floor(Math.random() * WRITERS);
        if (next[w]! < Math.min(n, (w + 1) * per)) order[done++] = next[w]!++;
      }
    }
    let keyBytes = 0;
    let valueBytes = 0;
    let rev = 1;
    for (let done = 0; done < n; ) {
      env.transactionSync(() => {
        for (let b = 0; b < BATCH && done < n; b++, done++) {
          const i = order[done]!;
          const key = keyOf(i);
          const value = opts.values === 'json' ? jsonValue(i) : randomValue();
          keyBytes += key.length;
          valueBytes += value.length;
          rev++;
          const kv = encodeKeyValue({ key, createRevision: rev, modRevision: rev, version: 1, value, lease: 0n });
          history.putSync(revKey(rev, 0), kv, { append: true });
          keyrevs.putSync(key, keyRevValue(rev, 0, EVENT_PUT));
        }
      });
    }
    const bytes = (db: typeof history) => {
      const s = db.getStats() as { treeBranchPageCount: number; treeLeafPageCount: number; overflowPages: number };
      return ((s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages) * opts.pageSize) / n;
    };
    const h = bytes(history);
    const k = bytes(keyrevs);
    return { keys: n, keyBytes: keyBytes / n, valueBytes: valueBytes / n, history: h, keyrevs: k, total: h + k };
  } finally {
    await env.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      keys: { type: 'string' },
      values: { type: 'string' },
      order: { type: 'string' },
      'page-size': { type: 'string' },
      compress: { type: 'string' },
      dictionary: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return void process.stdout.write(HELP);
  const opts = {
    keys: Number(values.keys ?? 100000),
    values: (values.values ?? 'random') as 'random' | 'json',
    order: (values.order ?? 'slices') as 'slices' | 'random' | 'sequential',
    pageSize: Number(values['page-size'] ?? 4096),
    compress: Number(values.compress ?? 0),
    dictionary: (values.dictionary ?? 'kvs') as 'kvs' | 'lmdb',
  };
  const problem =
    !Number.isInteger(opts.keys) || opts.keys < 1 ? '--keys takes a whole number of at least 1'
    : !['random', 'json'].includes(opts.values) ? `--values is random or json, not "${opts.values}"`
    : !['slices', 'random', 'sequential'].includes(opts.order) ? `--order is slices, random or sequential, not "${opts.order}"`
    : ![4096, 8192, 16384, 32768, 65536].includes(opts.pageSize) ? '--page-size is a power of two from 4096 to 65536'
    : !Number.isInteger(opts.compress) || opts.compress < 0 ? '--compress takes a whole number of bytes (0: off)'
    : !['kvs', 'lmdb'].includes(opts.dictionary) ? `--dictionary is kvs or lmdb, not "${opts.dictionary}"`
    : undefined;
  if (problem) {
    process.stderr.write(`${problem}\n\n${HELP}`);
    process.exitCode = 2;
    return;
  }
  const r = await measureLayout(opts);
  process.stdout.write(
    `${r.keys} keys (${r.keyBytes.toFixed(0)} B keys, ${r.valueBytes.toFixed(0)} B ${opts.values} values, order ${opts.order}), ` +
      `page ${opts.pageSize} B, compression ${opts.compress ? `above ${opts.compress} B, ${opts.dictionary}'s dictionary` : 'off'}: ` +
      `history ${r.history.toFixed(0)} + keyrevs ${r.keyrevs.toFixed(0)} = ${r.total.toFixed(0)} B/key\n`,
  );
}

// Run as a program (not when a test imports measureLayout).
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
