// Storage's side of the archiver hop: one long-lived `Upload` stream over
// <data-dir>/run/archiver.sock carrying WAL records, in index order, to the object store.
//
// Every chunk stays queued until the archiver reports it uploaded. When the stream breaks
// (archiver restarting, `kvs ctl restart archiver`), the link reconnects and sends the
// unacknowledged chunks again; the archiver skips what it already has, so nothing is lost and
// no WAL object is written twice. A chunk that cannot be uploaded is retried for as long as it
// takes: the writes waiting on it stall (their callers' own deadlines apply), and a clear
// error is logged until the object store is back.
import * as grpc from '@grpc/grpc-js';
import { service, num } from '../../shared/proto/index.js';
import { INTERNAL_CHANNEL_OPTIONS } from '../../shared/grpc/plumbing.js';
import type { Logger } from '../../shared/log.js';
import { ArchivePositions, type Archive } from '../../shared/objectstore/archive.js';

interface Progress {
  uploadedThrough: unknown;
  checkpointIndex: unknown;
  error: string;
}

interface Chunk {
  first: number;
  last: number;
  /** The leader term the records were written under (0: a single node); names the object. */
  term: number;
  /** Read lazily: async mode queues sealed segments by file, not in memory. */
  frames: () => Buffer;
  queuedAt: number;
  resolve(): void;
  reject(err: Error): void;
}

const ArchiverClient = grpc.makeGenericClientConstructor(service('kvs.archiver.Archiver'), 'Archiver');

/** After this long without progress on the oldest chunk, the stall is logged (then every 10 s). */
const STALL_LOG_MS = 5000;

export class ArchiverLink extends ArchivePositions implements Archive {
  private readonly client: grpc.Client & Record<string, any>;
  private stream: grpc.ClientDuplexStream<unknown, Progress> | undefined;
  private connected = false;
  /** Chunks not yet acknowledged, oldest first; the first `sent` were written on the stream. */
  private queue: Chunk[] = [];
  private sent = 0;
  private retryMs = 50;
  private closed = false;
  private lastError = '';
  private lastStallLog = 0;
  private lastUnreachableLog = 0;
  private readonly stallTimer: NodeJS.Timeout;
  private readonly helloWaiters: (() => void)[] = [];

  constructor(socket: string, private readonly log: Logger) {
    super();
    this.client = new ArchiverClient(`unix:${socket}`, grpc.credentials.createInsecure(), INTERNAL_CHANNEL_OPTIONS) as any;
    this.stallTimer = setInterval(() => this.reportStall(), 1000);
    this.stallTimer.unref();
    this.open();
  }

  /** Resolves once the archiver answered (its first progress report gives the positions). */
  ready(): Promise<void> {
    if (this.connected) return Promise.resolve();
    return new Promise((resolve) => this.helloWaiters.push(resolve));
  }

  /** Resolves once records first..last are in the object store. Rejects only on close(). */
  upload(first: number, last: number, frames: () => Buffer): Promise<void> {
    if (this.closed) return Promise.reject(new Error('archiver link closed'));
    if (last <= this.uploadedThrough) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.queue.push({ first, last, term: this.term, frames, queuedAt: Date.now(), resolve, reject });
      this.pump();
    });
  }

  private open(): void {
    if (this.closed) return;
    const stream = this.client.Upload() as grpc.ClientDuplexStream<unknown, Progress>;
    this.stream = stream;
    this.sent = 0;
    stream.on('data', (p: Progress) => {
      if (this.stream !== stream) return;
      this.progress(p);
      if (!this.connected) {
        // The first report: the archiver is there and told us where the object store stands.
        this.connected = true;
        this.retryMs = 50;
        this.log.info({ uploadedThrough: this.uploadedThrough, checkpointIndex: this.checkpointIndex }, 'connected to the archiver');
        for (const w of this.helloWaiters.splice(0)) w();
      }
      this.pump();
    });
    const broken = (err?: Error) => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      const wasConnected = this.connected;
      this.connected = false;
      if (this.closed) return;
      if (wasConnected) this.log.warn({ err: err?.message, pending: this.queue.length }, 'lost the archiver; reconnecting (pending WAL uploads are resent)');
      else {
        this.lastError = `archiver unreachable: ${err?.message ?? 'stream ended'}`;
        if (Date.now() - this.lastUnreachableLog >= 10_000) {
          this.lastUnreachableLog = Date.now();
          this.log.warn({ err: err?.message }, 'waiting for the archiver (writes wait for it)');
        }
      }
      setTimeout(() => this.open(), this.retryMs).unref();
      this.retryMs = Math.min(this.retryMs * 2, 1000);
    };
    stream.on('error', broken);
    stream.on('end', () => broken());
  }

  private progress(p: Progress): void {
    this.advance(num(p.uploadedThrough as number), num(p.checkpointIndex as number));
    if (p.error && p.error !== this.lastError) this.log.error({ error: p.error }, 'WAL upload to the object store is failing; retrying (writes wait)');
    this.lastError = p.error;
    let done = 0;
    while (done < this.queue.length && this.queue[done]!.last <= this.uploadedThrough) done++;
    if (done === 0) return;
    const finished = this.queue.splice(0, done);
    this.sent = Math.max(0, this.sent - done);
    if (this.lastStallLog) {
      this.log.info({ uploadedThrough: this.uploadedThrough }, 'WAL uploads caught up; writes continue');
      this.lastStallLog = 0;
    }
    for (const c of finished) c.resolve();
  }

  private pump(): void {
    if (!this.connected || !this.stream) return;
    while (this.sent < this.queue.length) {
      const c = this.queue[this.sent++]!;
      let frames: Buffer;
      try {
        frames = c.frames();
      } catch (err) {
        // A sealed segment vanished or is unreadable: nothing else can upload it. Fail loudly.
        this.log.error({ err, first: c.first, last: c.last }, 'cannot read WAL records to upload');
        this.queue.splice(--this.sent, 1);
        c.reject(err as Error);
        continue;
      }
      this.stream.write({ firstIndex: c.first, lastIndex: c.last, frames, term: c.term });
    }
  }

  private reportStall(): void {
    const oldest = this.queue[0];
    if (!oldest) return;
    const now = Date.now();
    const waited = now - oldest.queuedAt;
    if (waited < STALL_LOG_MS || now - this.lastStallLog < 10_000) return;
    this.lastStallLog = now;
    this.log.error(
      { waitedMs: waited, first: oldest.first, last: oldest.last, pending: this.queue.length, cause: this.lastError || 'waiting for the archiver' },
      `writes are stalled: WAL records ${oldest.first}..${oldest.last} have not reached the object store for ${Math.round(waited / 1000)} s; ` +
        'they are retried until it answers, nothing is lost',
    );
  }

  /** A checkpoint now (cluster: a new leader whose WAL no longer reaches back to the object store's). */
  checkpoint(): Promise<{ key: string; appliedIndex: number }> {
    return new Promise((resolve, reject) => {
      this.client.Checkpoint({}, (err: grpc.ServiceError | null, r: { key: string; appliedIndex: unknown }) => {
        if (err) return reject(new Error(err.details || err.message));
        this.advance(num(r.appliedIndex as number), num(r.appliedIndex as number));
        resolve({ key: r.key, appliedIndex: num(r.appliedIndex as number) });
      });
    });
  }

  close(): void {
    this.closed = true;
    clearInterval(this.stallTimer);
    const err = new Error('storage is stopping before the object store acknowledged the WAL records');
    for (const c of this.queue.splice(0)) c.reject(err);
    this.stream?.end();
    this.client.close();
  }
}
