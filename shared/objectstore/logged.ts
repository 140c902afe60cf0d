// `--log-level debug`: one line per object-store operation (operation, object key, bytes,
// duration, outcome), around any ObjectStore. openObjectStore puts it around the raw store,
// only when the logger is at debug, so bytes and durations are the real I/O (encrypted
// bodies, before decryption) and info level pays nothing.
import type { Logger } from '../log.js';
import { PreconditionFailedError, type GetResult, type ListOptions, type ObjectInfo, type ObjectStore, type ObjectVersion, type PutOptions, type PutResult } from './store.js';

const MSG = 'object store operation';

export class LoggedStore implements ObjectStore {
  constructor(
    private readonly inner: ObjectStore,
    private readonly log: Logger,
  ) {}

  get location(): string {
    return this.inner.location;
  }

  get(key: string, opts?: { versionId?: string }): Promise<GetResult | undefined> {
    return this.timed({ op: 'get', key, ...(opts?.versionId && { versionId: opts.versionId }) }, () => this.inner.get(key, opts), (r) =>
      r ? { outcome: 'ok', bytes: r.body.length } : { outcome: 'absent' },
    );
  }

  head(key: string): Promise<ObjectInfo | undefined> {
    return this.timed({ op: 'head', key }, () => this.inner.head(key), (r) => (r ? { outcome: 'ok', size: r.size } : { outcome: 'absent' }));
  }

  put(key: string, body: Buffer, opts?: PutOptions): Promise<PutResult> {
    const condition = opts?.ifNoneMatch ? { ifNoneMatch: opts.ifNoneMatch } : opts?.ifMatch ? { ifMatch: opts.ifMatch } : {};
    return this.timed({ op: 'put', key, bytes: body.length, ...condition }, () => this.inner.put(key, body, opts), () => ({ outcome: 'ok' }));
  }

  delete(key: string): Promise<void> {
    return this.timed({ op: 'delete', key }, () => this.inner.delete(key), () => ({ outcome: 'ok' }));
  }

  deleteMany(keys: string[]): Promise<void> {
    return this.timed({ op: 'deleteMany', key: keys[0], objects: keys.length }, () => this.inner.deleteMany(keys), () => ({ outcome: 'ok' }));
  }

  list(prefix: string, opts?: ListOptions): AsyncIterable<ObjectInfo> {
    return this.listing({ op: 'list', key: prefix, ...(opts?.startAfter && { startAfter: opts.startAfter }) }, this.inner.list(prefix, opts));
  }

  listVersions(prefix: string): AsyncIterable<ObjectVersion> {
    return this.listing({ op: 'listVersions', key: prefix }, this.inner.listVersions(prefix));
  }

  close(): void {
    this.inner.close();
  }

  private async timed<T>(fields: Record<string, unknown>, call: () => Promise<T>, result: (r: T) => Record<string, unknown>): Promise<T> {
    const start = performance.now();
    try {
      const r = await call();
      this.log.debug({ ...fields, ...result(r), durationMs: since(start) }, MSG);
      return r;
    } catch (err) {
      this.log.debug({ ...fields, ...failure(err), durationMs: since(start) }, MSG);
      throw err;
    }
  }

  /** A listing is one line when it ends: the objects it yielded, and whether the caller stopped early. */
  private async *listing<T>(fields: Record<string, unknown>, source: AsyncIterable<T>): AsyncIterable<T> {
    const start = performance.now();
    let objects = 0;
    let outcome: Record<string, unknown> = { outcome: 'ok', partial: true };
    try {
      for await (const item of source) {
        objects++;
        yield item;
      }
      outcome = { outcome: 'ok' };
    } catch (err) {
      outcome = failure(err);
      throw err;
    } finally {
      this.log.debug({ ...fields, ...outcome, objects, durationMs: since(start) }, MSG);
    }
  }
}

function failure(err: unknown): Record<string, unknown> {
  if (err instanceof PreconditionFailedError) return { outcome: 'precondition-failed' };
  return { outcome: 'error', err: (err as Error)?.message ?? String(err) };
}

function since(start: number): number {
  return Math.round((performance.now() - start) * 1000) / 1000;
}
