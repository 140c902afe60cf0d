// snapshot: after loading the data set twice over (every key with two versions in its
// history), `etcdctl snapshot save` of the whole database, three times per system; the
// median time and the file's size. etcd streams its bbolt file as it is; kvs writes etcd's
// format from its own tables first (services/gateway/snapshot.ts), so this is the cost of the
// way out to etcd next to etcd's own.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fmt, type Workload } from '../workload.js';

const ETCDCTL = '/usr/bin/etcdctl';
const SAVES = 3;

function save(endpoint: string, file: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(ETCDCTL, [`--endpoints=${endpoint}`, 'snapshot', 'save', file], { env: { ETCDCTL_API: '3', PATH: process.env.PATH ?? '' }, timeout: 600_000 }, (err, _out, stderr) =>
      err ? reject(new Error(`etcdctl snapshot save: ${stderr.trim().split('\n').at(-1) ?? err.message}`)) : resolve(),
    );
  });
}

export const snapshot: Workload = {
  name: 'snapshot',
  summary: `etcdctl snapshot save of the data set written twice over (median of ${SAVES})`,
  clients: 0,
  preload: true,
  preloadRevisions: 2,
  async measure(target) {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-bench-snapshot-'));
    try {
      const ms: number[] = [];
      let bytes = 0;
      for (let i = 0; i < SAVES; i++) {
        const file = path.join(dir, `snap-${i}.db`);
        const started = performance.now();
        await save(target.kv.endpoint, file);
        ms.push(performance.now() - started);
        bytes = (await stat(file)).size;
        await rm(file);
      }
      ms.sort((a, b) => a - b);
      const saveMs = ms[Math.floor(ms.length / 2)]!;
      return { saveMs, saveMinMs: ms[0]!, saveMaxMs: ms.at(-1)!, snapshotBytes: bytes, mbPerSec: bytes / 1e6 / (saveMs / 1000) };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
  metrics: [
    { key: 'saveMs', label: 'save', format: (v) => `save ${fmt.int(v)} ms`, better: 'lower' },
    { key: 'snapshotBytes', label: 'file', format: (v) => `file ${fmt.mb(v)}`, better: 'lower' },
  ],
};
