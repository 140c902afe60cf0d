// `npm run etcd-import [-- flags]`: the time `kvs snapshot restore` takes to import an etcd
// snapshot of many keys (docs/benchmarks.md, "Import of an etcd snapshot"). The snapshot is
// written by the test kit's bbolt writer (testkit/etcd-fixture.ts) in etcd's layout, with the SHA-256
// trailer `etcdctl snapshot save` appends; loading a million keys into a real etcd would take
// far longer than the import being measured.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { fileSink, writeEtcdFixture } from '../testkit/etcd-fixture.js';
import { restoreSnapshot, type SnapshotRestoreResult } from '../supervisor/snapshot-restore.js';
import { KEY_BYTES } from './keys.js';

const HELP = `Usage: npm run etcd-import -- [flags]

Writes an etcd snapshot of --keys keys, each put --revisions times with --value-bytes values
(the bench's 64-byte keys), then times kvs snapshot restore of it into a new data directory.

  --keys <n>          keys (default 1000000)
  --revisions <n>     puts per key (default 3)
  --value-bytes <n>   value size (default 256)
  --dir <path>        where the snapshot and the data directory go (default: a temp dir,
                      removed afterwards)
  --reuse             restore the snapshot already in --dir instead of writing one
  -h, --help          this text
`;

export interface ImportMeasurement {
  keys: number;
  revisions: number;
  snapshotBytes: number;
  writeSeconds: number;
  restoreSeconds: number;
  /** CPU time of the restore (user + system, this process and its threads). */
  restoreCpuSeconds: number;
  result: SnapshotRestoreResult;
}

export async function measureImport(opts: { keys: number; revisions: number; valueBytes: number; dir: string; reuse?: boolean }): Promise<ImportMeasurement> {
  const file = path.join(opts.dir, 'etcd.db');
  const t0 = performance.now();
  let size = fs.existsSync(file) ? fs.statSync(file).size - 32 : 0;
  if (!opts.reuse || size <= 0) size = writeSnapshot(file, opts);
  const t1 = performance.now();
  fs.rmSync(path.join(opts.dir, 'restored'), { recursive: true, force: true });
  const cpu = process.cpuUsage();
  const result = await restoreSnapshot({ file, dataDir: path.join(opts.dir, 'restored') });
  const t2 = performance.now();
  const used = process.cpuUsage(cpu);
  return {
    keys: opts.keys,
    revisions: opts.revisions,
    snapshotBytes: size,
    writeSeconds: (t1 - t0) / 1000,
    restoreSeconds: (t2 - t1) / 1000,
    restoreCpuSeconds: (used.user + used.system) / 1e6,
    result,
  };
}

function writeSnapshot(file: string, opts: { keys: number; revisions: number; valueBytes: number }): number {
  const fd = fs.openSync(file, 'w+');
  let size: number;
  try {
    const key = (i: number) => Buffer.from(`/registry/bench/${String(i).padStart(KEY_BYTES - 16, '0')}`);
    size = writeEtcdFixture(fileSink(fd), { keys: opts.keys, revisions: opts.revisions, valueBytes: opts.valueBytes, key });
    // The trailer etcdctl snapshot save appends: the SHA-256 of the database.
    const h = createHash('sha256');
    const chunk = Buffer.alloc(1 << 20);
    for (let at = 0; at < size; at += chunk.length) {
      const n = fs.readSync(fd, chunk, 0, Math.min(chunk.length, size - at), at);
      h.update(chunk.subarray(0, n));
    }
    fs.writeSync(fd, h.digest(), 0, 32, size);
  } finally {
    fs.closeSync(fd);
  }
  return size;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      keys: { type: 'string', default: '1000000' },
      revisions: { type: 'string', default: '3' },
      'value-bytes': { type: 'string', default: '256' },
      dir: { type: 'string' },
      reuse: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const dir = values.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-etcd-import-'));
  fs.mkdirSync(dir, { recursive: true });
  try {
    const m = await measureImport({ keys: Number(values.keys), revisions: Number(values.revisions), valueBytes: Number(values['value-bytes']), dir, reuse: values.reuse === true });
    process.stdout.write(
      `etcd snapshot: ${m.keys} keys x ${m.revisions} revisions, ${(m.snapshotBytes / 2 ** 20).toFixed(0)} MiB (written in ${m.writeSeconds.toFixed(1)} s)\n` +
        `kvs snapshot restore: ${m.restoreSeconds.toFixed(1)} s, ${m.restoreCpuSeconds.toFixed(1)} s of CPU (revision ${m.result.revision}, ${m.result.keys} keys)\n`,
    );
  } finally {
    if (!values.dir) fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  main().catch((err) => {
    process.stderr.write(`${(err as Error).stack ?? err}\n`);
    process.exit(1);
  });
}
