// The console's Durability and leader-lock facts: read from the object store (as `kvs status`
// and a dry run of `kvs gc` do), from the archiver's Status on run/archiver.sock (as `kvs ctl
// checkpoint` talks to it) and from the local WAL directory.
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { socketPath } from '../../shared/config.js';
import { service, num } from '../../shared/proto/index.js';
import { objectStoreOptions, openObjectStore, type ObjectStore } from '../../shared/objectstore/index.js';
import { LEADER_LOCK } from '../../shared/objectstore/layout.js';
import { listSegments } from '../../shared/wal/segment.js';
import { readStatus } from '../commands/status.js';
import { runGc } from '../commands/gc.js';

export interface LeaderLockView {
  nodeId: string;
  memberId: string;
  term: number;
  clientUrl: string;
  /** The holder's last write of the lock, ms since the epoch (its own clock). */
  lastTouchMs: number;
  released: boolean;
}

export interface ArchiverStatus {
  uploadedThrough: number;
  checkpointIndex: number;
  latestCheckpoint: string;
  walUploads: number;
  walUploadErrors: number;
  checkpoints: number;
  lastError: string;
}

export class Durability {
  private store: Promise<ObjectStore> | undefined;

  constructor(private readonly cfg: Config) {}

  get enabled(): boolean {
    return !!this.cfg.s3Bucket;
  }

  private open(): Promise<ObjectStore> {
    this.store ??= openObjectStore(objectStoreOptions(this.cfg)).catch((err) => {
      this.store = undefined;
      throw err;
    });
    return this.store;
  }

  async leaderLock(): Promise<LeaderLockView | undefined> {
    if (!this.enabled) return undefined;
    const got = await (await this.open()).get(LEADER_LOCK);
    if (!got) return undefined;
    const r = JSON.parse(got.body.toString('utf8')) as { nodeId: string; memberId: string; term: number; clientUrl: string; lastSeenNano: string; released?: boolean };
    return { nodeId: r.nodeId, memberId: r.memberId, term: r.term, clientUrl: r.clientUrl, lastTouchMs: Number(BigInt(r.lastSeenNano ?? '0') / 1_000_000n), released: !!r.released };
  }

  archiverStatus(): Promise<ArchiverStatus> {
    return this.archiver('Status', 5000).then((r) => ({
      uploadedThrough: num(r.uploadedThrough),
      checkpointIndex: num(r.checkpointIndex),
      latestCheckpoint: r.latestCheckpoint ?? '',
      walUploads: num(r.walUploads),
      walUploadErrors: num(r.walUploadErrors),
      checkpoints: num(r.checkpoints),
      lastError: r.lastError ?? '',
    }));
  }

  /** `kvs ctl checkpoint`: the archiver writes a checkpoint now. */
  checkpoint(): Promise<{ key: string; revision: number; unchanged: boolean; pieces: number; uploadedPieces: number }> {
    return this.archiver('Checkpoint', 600_000).then((r) => ({ key: r.key, revision: num(r.revision), unchanged: !!r.unchanged, pieces: r.pieces ?? 0, uploadedPieces: r.uploadedPieces ?? 0 }));
  }

  private archiver(method: string, ms: number): Promise<any> {
    const Ctor = grpc.makeGenericClientConstructor(service('kvs.archiver.Archiver'), 'Archiver');
    const client = new Ctor(`unix:${socketPath(this.cfg.dataDir, 'archiver')}`, grpc.credentials.createInsecure()) as any;
    return new Promise((resolve, reject) => {
      client[method]({}, { deadline: Date.now() + ms }, (err: grpc.ServiceError | null, res: unknown) => {
        client.close();
        if (err) reject(new Error(`archiver: ${err.details || err.message}`));
        else resolve(res);
      });
    });
  }

  /**
   * Local WAL segments holding entries the archiver has not uploaded: those after the one that
   * holds `uploadedThrough + 1` (the last, open one counts once it starts past that index).
   */
  pendingSegments(uploadedThrough: number): number {
    let segs: { firstIndex: bigint }[];
    try {
      segs = listSegments(path.join(this.cfg.dataDir, 'wal'));
    } catch {
      return 0;
    }
    let n = 0;
    for (let i = 0; i < segs.length; i++) {
      const next = segs[i + 1];
      const last = next ? next.firstIndex - 1n : undefined;
      if (last === undefined ? segs[i]!.firstIndex > BigInt(uploadedThrough) : last > BigInt(uploadedThrough)) n++;
    }
    return n;
  }

  async report(keep: number): Promise<object> {
    if (!this.enabled) return { enabled: false };
    const store = await this.open();
    const [status, archiver, gc] = await Promise.all([
      readStatus(store),
      this.archiverStatus().catch((err: Error) => ({ error: err.message })),
      runGc(store, { keep, dryRun: true }).catch((err: Error) => ({ error: err.message })),
    ]);
    const pending = 'uploadedThrough' in archiver ? this.pendingSegments(archiver.uploadedThrough) : undefined;
    return { enabled: true, ...status, archiver, pendingSegments: pending, gc: { keep, ...gc } };
  }

  close(): void {
    void this.store?.then((s) => s.close()).catch(() => undefined);
  }
}

