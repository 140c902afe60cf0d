// A test-only failpoint for the object store, for the chaos harness (chaos/, docs/reliability.md):
// with KVS_FAILPOINT_OBJECTSTORE naming a file, every operation first reads it: `refuse` fails
// the operation, `hang` holds it until the file says otherwise, anything else (or no file)
// lets it through. Without the variable openObjectStore never builds this wrapper. It stands in
// for an S3 outage where no proxy can be put in front: the local-directory store.
import { readFile } from 'node:fs/promises';
import type { GetResult, ListOptions, ObjectInfo, ObjectStore, ObjectVersion, PutOptions, PutResult } from './store.js';

export const FAILPOINT_ENV = 'KVS_FAILPOINT_OBJECTSTORE';

export class FailpointStore implements ObjectStore {
  constructor(
    private readonly inner: ObjectStore,
    private readonly controlFile: string,
  ) {}

  get location(): string {
    return this.inner.location;
  }

  private async gate(): Promise<void> {
    for (;;) {
      const mode = (await readFile(this.controlFile, 'utf8').catch(() => '')).trim();
      if (mode === 'refuse') throw new Error('object store unavailable (failpoint)');
      if (mode !== 'hang') return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async get(key: string, opts?: { versionId?: string }): Promise<GetResult | undefined> {
    await this.gate();
    return this.inner.get(key, opts);
  }
  async head(key: string): Promise<ObjectInfo | undefined> {
    await this.gate();
    return this.inner.head(key);
  }
  async put(key: string, body: Buffer, opts?: PutOptions): Promise<PutResult> {
    await this.gate();
    return this.inner.put(key, body, opts);
  }
  async delete(key: string): Promise<void> {
    await this.gate();
    return this.inner.delete(key);
  }
  async deleteMany(keys: string[]): Promise<void> {
    await this.gate();
    return this.inner.deleteMany(keys);
  }
  async *list(prefix: string, opts?: ListOptions): AsyncIterable<ObjectInfo> {
    await this.gate();
    yield* this.inner.list(prefix, opts);
  }
  async *listVersions(prefix: string): AsyncIterable<ObjectVersion> {
    await this.gate();
    yield* this.inner.listVersions(prefix);
  }
  close(): void {
    this.inner.close();
  }
}
