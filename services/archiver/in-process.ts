// Storage's Archive when the archiver runs in its own process (an embedded node): the same
// uploads, positions and checkpoints as ArchiverLink gives over the Unix socket, as calls.
import type { Archive } from '../../shared/objectstore/archive.js';
import type { Archiver } from './archiver.js';

export class InProcessArchive implements Archive {
  uploadedThrough: number;
  checkpointIndex: number;
  /** This node's leader term (cluster mode), stamped on the chunks queued from now on. */
  private term = 0;
  private closed = false;
  private readonly waiting = new Set<(err: Error) => void>();
  private readonly unsubscribe: () => void;

  constructor(private readonly archiver: Archiver) {
    this.uploadedThrough = archiver.uploader.uploadedThrough;
    this.checkpointIndex = archiver.uploader.checkpointIndex;
    this.unsubscribe = archiver.onProgress((p) => {
      this.uploadedThrough = Math.max(this.uploadedThrough, p.uploadedThrough);
      this.checkpointIndex = Math.max(this.checkpointIndex, p.checkpointIndex);
    });
  }

  ready(): Promise<void> {
    return Promise.resolve();
  }

  get archivedThrough(): number {
    return Math.min(this.uploadedThrough, this.checkpointIndex);
  }

  leadFrom(term: number, termStart: number): void {
    this.term = term;
    if (termStart > 0) this.uploadedThrough = termStart - 1;
  }

  upload(first: number, last: number, frames: () => Buffer): Promise<void> {
    if (this.closed) return Promise.reject(new Error('archive closed'));
    if (last <= this.uploadedThrough) return Promise.resolve();
    return new Promise((resolve, reject) => {
      // close() fails the waiters at once, as ArchiverLink's does: a retrying upload would hold
      // storage's stop for as long as the object store is down.
      this.waiting.add(reject);
      this.archiver.upload(first, last, frames, this.term).then(
        () => {
          this.waiting.delete(reject);
          this.uploadedThrough = Math.max(this.uploadedThrough, last);
          resolve();
        },
        (err: Error) => {
          this.waiting.delete(reject);
          reject(err);
        },
      );
    });
  }

  async checkpoint(): Promise<{ key: string; appliedIndex: number }> {
    const r = await this.archiver.checkpoint();
    this.checkpointIndex = Math.max(this.checkpointIndex, r.latest.appliedIndex);
    this.uploadedThrough = Math.max(this.uploadedThrough, r.latest.appliedIndex);
    return { key: r.key, appliedIndex: r.latest.appliedIndex };
  }

  close(): void {
    this.closed = true;
    this.unsubscribe();
    const err = new Error('storage is stopping before the object store acknowledged the WAL records');
    for (const reject of this.waiting) reject(err);
    this.waiting.clear();
  }
}
