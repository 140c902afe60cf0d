// The archiver's WAL uploads: chunks arrive in index order and are stored as
// wal/<first>-<last>[.t<term>].wal, one at a time, each acknowledged once stored. A chunk the object
// store already holds (storage resending after a reconnect) is acknowledged without a write, so
// no WAL object is ever written twice; create-if-absent guards the rest. A failing upload is
// retried with backoff for as long as it takes, and reported meanwhile (`onReport`: the
// process host tells storage over its Upload stream, archive.ts resolves in-process waiters).
import { setTimeout as sleep } from 'node:timers/promises';
import { PreconditionFailedError, type ObjectStore } from '../../shared/objectstore/store.js';
import { walKey } from '../../shared/objectstore/layout.js';
import type { Logger } from '../../shared/log.js';
import * as M from '../../shared/metrics.js';

/** Where the uploads stand: sent to storage after an upload, a checkpoint, or an error. */
export interface UploadProgress {
  uploadedThrough: number;
  checkpointIndex: number;
  /** Why uploads are failing now ('' while they work). */
  error: string;
}

const BACKOFF_START_MS = 100;
const BACKOFF_MAX_MS = 5000;

export class WalUploader {
  /** Every record at or below this is in the object store (WAL objects or the latest checkpoint). */
  uploadedThrough: number;
  checkpointIndex: number;
  readonly stats = { uploads: 0, errors: 0, conflicts: 0 };
  lastError = '';
  private chain: Promise<void> = Promise.resolve();
  private closed = false;
  /** The term of the chunks uploaded last, and whether uploadedThrough must be read again for a new one. */
  private term = 0;
  private stale = false;

  constructor(
    private readonly store: ObjectStore,
    private readonly log: Logger,
    start: { uploadedThrough: number; checkpointIndex: number },
    /** Reads the stored position again from the object store. */
    private readonly position: () => Promise<number>,
    /**
     * The term a single node's chunks (term 0) are uploaded under: the prefix's newest cluster
     * term, if it ever ran as a cluster, so that its records are not cut as an older term's.
     */
    private readonly singleNodeTerm = 0,
  ) {
    this.uploadedThrough = start.uploadedThrough;
    this.checkpointIndex = start.checkpointIndex;
  }

  /** Called with every report (after an upload, a checkpoint, or an error). */
  onReport: (p: UploadProgress) => void = () => {};

  /**
   * Queues records first..last for upload after the chunks queued before; resolves once they
   * are stored (or were already), rejects only when the archiver stops first or `frames` cannot
   * be read (a sealed segment that vanished). A term of 0 is a single node's.
   */
  submit(first: number, last: number, frames: () => Buffer, term: number): Promise<void> {
    const done = this.chain.then(() => this.upload(first, last, frames, term || this.singleNodeTerm));
    this.chain = done.then(
      () => this.report(),
      (err: Error) => this.log.warn({ err: err.message, first, last }, 'WAL chunk not uploaded'),
    );
    return done;
  }

  /** Tells the listener where things stand. */
  report(error = ''): void {
    this.onReport({ uploadedThrough: this.uploadedThrough, checkpointIndex: this.checkpointIndex, error });
  }

  private async upload(first: number, last: number, read: () => Buffer, term: number): Promise<void> {
    if (term !== this.term) {
      // A new leader's term: where the history ends is read again, as it may be lower than what
      // this archiver uploaded under an earlier term (cut where the newer terms began).
      this.term = term;
      this.stale = true;
    }
    if (this.stale) await this.rereadPosition();
    if (last <= this.uploadedThrough) return; // resent after a reconnect: already stored
    const started = Date.now();
    let backoff = BACKOFF_START_MS;
    while (first > this.uploadedThrough + 1) {
      // Storage continues where the object store stood when it last heard from an archiver;
      // this one may have read the store while it answered wrongly (or not at all): read the
      // position again. A hole is never uploaded over, it would lose records.
      if (this.closed) throw new Error('archiver stopping');
      let error = `WAL chunk ${first}..${last} does not follow the uploaded WAL (through ${this.uploadedThrough})`;
      try {
        this.uploadedThrough = Math.max(this.uploadedThrough, await this.position());
        if (first <= this.uploadedThrough + 1) break;
      } catch (err) {
        error += `; reading the uploaded WAL failed: ${(err as Error).message}`;
      }
      this.stats.errors++;
      M.walUploadErrorsTotal.inc();
      this.lastError = error;
      this.log.error({ first, last, retryInMs: backoff }, `${error}; retrying (writes wait)`);
      this.report(error);
      await sleep(backoff);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
    if (last <= this.uploadedThrough) return;
    const frames = read();
    const key = walKey(BigInt(first), BigInt(last), term);
    for (;;) {
      if (this.closed) throw new Error('archiver stopping');
      try {
        await this.store.put(key, frames, { ifNoneMatch: '*' });
        this.stats.uploads++;
        M.walUploadsTotal.inc();
        break;
      } catch (err) {
        let error: string;
        if (err instanceof PreconditionFailedError) {
          const same = await this.sameObject(key, frames);
          if (same === true) {
            this.stats.conflicts++;
            M.walUploadConflictsTotal.inc();
            break;
          }
          error =
            same === false
              ? `WAL object ${this.store.location}/${key} exists with other content: another node writes to this prefix, or this data directory belongs to another one`
              : `WAL object ${this.store.location}/${key} exists and could not be read back: ${same}`;
        } else {
          error = `uploading ${this.store.location}/${key} failed: ${(err as Error).message}`;
        }
        this.stats.errors++;
        M.walUploadErrorsTotal.inc();
        this.lastError = error;
        this.log.error({ key, retryInMs: backoff, failingForMs: Date.now() - started }, `${error}; retrying (writes wait)`);
        this.report(error);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
    }
    if (this.lastError) {
      this.log.info({ key, stalledMs: Date.now() - started }, 'WAL upload succeeded again');
      this.lastError = '';
    }
    this.uploadedThrough = last;
    // From the chunk's arrival to its acknowledgement, retries included: what a write waits.
    M.walUploadDuration.observe((Date.now() - started) / 1000);
    this.log.debug({ key, bytes: frames.length }, 'WAL uploaded');
  }

  /** Sets uploadedThrough from the object store (down too), retrying until the store answers. */
  private async rereadPosition(): Promise<void> {
    let backoff = BACKOFF_START_MS;
    while (this.stale) {
      if (this.closed) throw new Error('archiver stopping');
      try {
        this.uploadedThrough = await this.position();
        this.stale = false;
      } catch (err) {
        this.lastError = `reading the uploaded WAL failed: ${(err as Error).message}`;
        this.log.error({ retryInMs: backoff }, `${this.lastError}; retrying (writes wait)`);
        this.report(this.lastError);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
    }
  }

  /** true: the stored object has these bytes; false: other bytes; a string: it could not be read. */
  private async sameObject(key: string, frames: Buffer): Promise<boolean | string> {
    try {
      const got = await this.store.get(key);
      return got ? got.body.equals(frames) : 'it vanished';
    } catch (err) {
      return (err as Error).message;
    }
  }

  /** Finishes the upload in progress (or gives up on a retrying one), then stops. */
  async close(): Promise<void> {
    this.closed = true;
    await this.chain;
  }
}
