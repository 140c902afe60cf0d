// Storage's Archive when the archiver runs in its own process (an embedded node): the same
// uploads, positions and checkpoints as ArchiverLink gives over the Unix socket, as calls.
import { ArchivePositions, type Archive } from '../../shared/objectstore/archive.js';
import type { Archiver } from './archiver.js';

export class InProcessArchive extends ArchivePositions implements Archive {
  private closed = false;
  private readonly waiting = new Set<(err: Error) => void>();
  private readonly unsubscribe: () => void;

  constructor(private readonly archiver: Archiver) {
    super();
    this.advance(archiver.uploader.uploadedThrough, archiver.uploader.checkpointIndex);
    this.unsubscribe = archiver.onProgress((p) => this.advance(p.uploadedThrough, p.checkpointIndex));
  }

  ready(): Promise<void> {
    return Promise.resolve();
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
          this.advance(last, 0);
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
    this.advance(r.latest.appliedIndex, r.latest.appliedIndex);
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
