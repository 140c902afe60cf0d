// Storage's view of the archiver: where its WAL goes to reach the object store, and how much of
// it the object store holds. Two implementations: ArchiverLink (services/storage/archiver-link.ts,
// the archiver process over its Unix socket) and InProcessArchive (services/archiver/in-process.ts,
// the same archiver in storage's own process, for an embedded node). Storage's code is the same
// over either.

export interface Archive {
  /** Resolves once the archiver answered and the positions below hold what the object store has. */
  ready(): Promise<void>;
  /** Every record at or below this is in the object store (WAL objects or the latest checkpoint). */
  readonly uploadedThrough: number;
  /** Applied index of the latest checkpoint. */
  readonly checkpointIndex: number;
  /** Local WAL segments at or below this may be deleted: uploaded, and covered by a checkpoint. */
  readonly archivedThrough: number;
  /**
   * This node leads `term`, which begins at `termStart` in the object store: the store's
   * history ends just before it, whatever was seen uploaded before (uploads of an earlier term
   * past that point are not history; wal-history.ts). Chunks queued from now on carry the term.
   */
  leadFrom(term: number, termStart: number): void;
  /**
   * Resolves once WAL records first..last (`frames`, as written to the WAL, read when they are
   * sent) are in the object store. Retried for as long as it takes; rejects only on close() or
   * when `frames` cannot be read.
   */
  upload(first: number, last: number, frames: () => Buffer): Promise<void>;
  /** A checkpoint now (cluster: a new leader whose WAL no longer reaches back to the object store's). */
  checkpoint(): Promise<{ key: string; appliedIndex: number }>;
  /** Fails the uploads still waiting (storage is stopping) and lets go of the archiver. */
  close(): void;
}

/**
 * The positions both implementations keep, and their rules: they only move forward as the
 * archiver reports progress, and a new term's start cuts what counts as uploaded.
 */
export abstract class ArchivePositions {
  /** Every record at or below this is in the object store (WAL objects or the latest checkpoint). */
  uploadedThrough = 0;
  /** Applied index of the latest checkpoint. */
  checkpointIndex = 0;
  /** This node's leader term (cluster mode), stamped on the chunks queued from now on. */
  term = 0;

  /** Local WAL segments at or below this may be deleted: uploaded, and covered by a checkpoint. */
  get archivedThrough(): number {
    return Math.min(this.uploadedThrough, this.checkpointIndex);
  }

  /** See Archive.leadFrom. */
  leadFrom(term: number, termStart: number): void {
    this.term = term;
    if (termStart > 0) this.uploadedThrough = termStart - 1;
  }

  /** What the archiver reported it holds. */
  protected advance(uploadedThrough: number, checkpointIndex: number): void {
    this.uploadedThrough = Math.max(this.uploadedThrough, uploadedThrough);
    this.checkpointIndex = Math.max(this.checkpointIndex, checkpointIndex);
  }
}
