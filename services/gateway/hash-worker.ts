// Maintenance.Hash and HashKV read every stored revision: seconds on a long history, during
// which an event loop running them would serve no one else. They run on one worker thread
// (hash-thread.ts, started at the first call) with its own read snapshot, as etcd runs them
// beside its other requests.
import { Worker } from 'node:worker_threads';
import { EtcdError } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';

export interface HashJob {
  id: number;
  kind: 'hash' | 'hashKV';
  /** HashKV's revision (0: the current one). */
  revision: number;
}

export interface HashResult {
  hash: number;
  /** The store's revision in the snapshot hashed (the header's). */
  revision: number;
  /** etcd's compactMainRev (HashKV only). */
  compactRevision: number;
}

export type HashReply = { id: number; ok: HashResult } | { id: number; error: { code: number; message: string } };

const THREAD = new URL('./hash-thread.js', import.meta.url);

export class HashWorker {
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve(r: HashResult): void; reject(e: Error): void }>();

  constructor(private readonly dataDir: string, private readonly log: Logger) {}

  hash(): Promise<HashResult> {
    return this.run('hash', 0);
  }

  hashKV(revision: number): Promise<HashResult> {
    return this.run('hashKV', revision);
  }

  private run(kind: HashJob['kind'], revision: number): Promise<HashResult> {
    const w = this.thread();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      w.postMessage({ id, kind, revision } satisfies HashJob);
    });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(THREAD, { workerData: { dataDir: this.dataDir } });
    w.unref();
    w.on('message', (r: HashReply) => {
      const p = this.waiting.get(r.id);
      if (!p) return;
      this.waiting.delete(r.id);
      if ('ok' in r) p.resolve(r.ok);
      else p.reject(new EtcdError(r.error.code, r.error.message));
    });
    const gone = (why: string) => {
      if (this.worker !== w) return;
      this.worker = undefined;
      if (this.waiting.size) this.log.error({ why }, 'the hash thread stopped; its calls fail');
      for (const p of this.waiting.values()) p.reject(new EtcdError(13, `kvs: the hash thread stopped: ${why}`));
      this.waiting.clear();
    };
    w.on('error', (err) => gone(err.message));
    w.on('exit', (code) => gone(`exit ${code}`));
    this.worker = w;
    return w;
  }

  close(): void {
    void this.worker?.terminate();
    this.worker = undefined;
  }
}
