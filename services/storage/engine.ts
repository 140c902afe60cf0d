// The storage engine as its callers see it (the gRPC server, the peer link, the compactor, auth
// startup, storage's main): a small interface, read before the modules that implement it, as
// etcd's mvcc/kv.go is read before kvstore.go.
//
// The write path: every request that arrives while a batch is being made durable waits in the
// queue; the next drain executes them all in ONE LMDB write transaction, appends their WAL
// entries with ONE fdatasync, and only then commits LMDB and answers. So readers (the gateway
// reads LMDB directly) never see a write that is not yet durable, and an acknowledged write is
// in the WAL, which is replayed after a crash from LMDB's applied index. Which drain runs a
// batch depends on the mode:
//
// - single node (engine/local-drain.ts): execute, append, commit, answer;
// - single node with --wal-sync-upload, or a cluster's leader (engine/leader-pipeline.ts): the
//   batch is executed in an ABORTED transaction, appended, then uploaded or sent to the
//   followers, and applied once the object store or the followers have it; a leader keeps up
//   to two batches in flight;
// - a cluster's follower (engine/follower-replica.ts): takes no client writes, appends what the
//   leader sends and applies what it committed.
//
// engine/core.ts holds what every mode shares (executing a batch, the revision state, answers);
// engine/storage-engine.ts picks the drain and changes roles; engine/open.ts opens and replays.
import type { MvccDb } from '../../shared/mvcc/schema.js';
import type { WritePipeline } from '../../shared/config.js';
import type { Tracing } from '../../shared/tracing.js';
import type { Wal } from './wal/log.js';
import type { WalRecord } from '../../shared/wal/frame.js';
import type { Executor, Identity } from './mvcc/execute.js';
import type { Lessor } from './lease/lessor.js';
import type { CommitFeed } from './feed.js';
import type { DiskSpace } from './disk-space.js';

/** The answer to one write: the response message's bytes, or etcd's status and message. */
export interface WriteResult {
  body?: Buffer;
  code: number;
  message: string;
}

/** Called once a write is durable and applied, or has failed. */
export type Done = (r: WriteResult) => void;

/**
 * Cluster mode (services/storage/peer-attach.ts): the peer agent sets the role. `none`
 * (electing) and `follower` take no client writes; a follower appends and applies what the
 * leader sends.
 */
export type ClusterRole = 'single' | 'none' | 'leader' | 'follower';

/** Resolves once the batch is in the object store (single node, --wal-sync-upload). */
export type Upload = (first: number, last: number, frames: Buffer) => Promise<void>;

/**
 * Leader (cluster mode): how a batch reaches the followers. `send` hands it over before this
 * node's own fsync, so that the followers append and fsync while it runs (docs/cluster.md: the
 * leader's order of work), and resolves once the batch may be acknowledged (followers ACKed, or
 * uploaded and fenced); `durable` reports the local fsync, with its error if it failed (the
 * batch is then never acknowledged, and `send` rejects).
 */
export interface Replicator {
  send(first: number, last: number, frames: Buffer, revision: number): Promise<void>;
  durable(through: number, err?: Error): void;
  /** Resolves once the node has proved it still leads (a batch that wrote nothing is a read). */
  confirm(): Promise<void>;
}

export interface EngineOptions {
  /** The WAL, when the caller opened it already (openWal) to upload its tail first. */
  wal?: Wal;
  /**
   * Synchronous upload: resolves once WAL records first..last (`frames`, as written to the
   * WAL) are in the object store. Rejects only when storage is stopping.
   */
  upload?: Upload;
  /** Sealed WAL segments are kept until this index covers them (uploaded and checkpointed). */
  archivedThrough?: () => number;
  /** The clock of lease deadlines (tests move it). */
  now?: () => number;
  /** The free-space floor writes need (default: MIN_FREE_BYTES on the database's filesystem). */
  space?: DiskSpace;
  /** Only while tracing is on: WAL appends become kvs.wal.append spans. */
  tracing?: Tracing;
  /** Simple-token lifetime (--token-ttl) in ms; default 300 s, as etcd. */
  tokenTtlMs?: number;
  /**
   * Cluster mode: the engine starts with role `none` and replays nothing LMDB has not applied:
   * those records stay staged until the role is known.
   */
  cluster?: { memberId: string; clusterId: string };
  /** Cluster leader: batches in flight at once (--write-pipeline). */
  writePipeline?: WritePipeline;
}

/** One storage node's MVCC store behind its WAL (engine/open.ts opens one). */
export interface Engine {
  readonly db: MvccDb;
  readonly wal: Wal;
  /** Reads and the execution of writes against LMDB; its revision runs ahead while batches are in flight. */
  readonly executor: Executor;
  readonly identity: Identity;
  readonly lessor: Lessor;
  /** Committed batches, for watchers (Storage.Feed). */
  readonly feed: CommitFeed;

  /** The current revision as readers see it: not that of a batch still being uploaded or ACKed. */
  readonly revision: number;
  /** The last WAL index applied to LMDB. */
  readonly appliedIndex: number;
  /** The WAL's last index: past `appliedIndex` are staged entries (cluster mode). */
  readonly lastIndex: number;

  /**
   * Queues one write; `done` is called once it is durable and applied, or has failed.
   * `authRevision`: the auth revision the gateway checked the caller's permission at (0: none).
   * `traceParent` (tracing on) makes the write's kvs.wal.append span a child of the caller's.
   */
  submit(op: number, body: Uint8Array, done: Done, authRevision?: number, traceParent?: string): void;
  /** Why writes are refused now (the free-space floor), or undefined while they are taken. */
  writesRefused(): string | undefined;
  /** Seals the WAL if its segment is older than the rotation age (called from a timer). */
  rotateIfDue(): void;
  /** Deletes sealed WAL segments LMDB (synced) and the object store (archived) no longer need. */
  trimWal(): void;
  /** Stops taking writes, finishes or fails the queued ones, and closes the WAL and LMDB. */
  close(): Promise<void>;

  // ---- cluster mode (driven by services/storage/peer-attach.ts) ----------------------------

  /** This node's role, set by the peer agent through becomeLeader/becomeFollower. */
  readonly role: ClusterRole;
  /** Leader: how a batch reaches the followers before it is applied and answered. */
  replicate: Replicator | undefined;
  /** Leader: a connected follower runs on another machine (the peer agent's Placement). */
  followersElsewhere: boolean;
  /**
   * Becomes leader: every staged entry is applied (the previous leader may have acknowledged
   * it), then client writes are taken at this term. Below the free-space floor with staged
   * entries it throws FreeSpaceError and stays as it was.
   */
  becomeLeader(term: number): void;
  /**
   * Becomes a follower (or electing, `none`): queued writes fail with etcd's no-leader error.
   * Staged entries are kept until `dropStaged` (a leader answered and sends them again).
   */
  becomeFollower(role: 'follower' | 'none', term: number, dropStaged?: boolean): Promise<void>;
  /**
   * Follower: appends entries the leader sent (one write, one fdatasync), then applies what is
   * committed through `commitThrough`. Entries already held are skipped; a gap throws; below
   * the free-space floor it throws FreeSpaceError before touching the WAL or LMDB.
   */
  appendReplicated(records: WalRecord[], commitThrough?: number): void;
  /** Follower: applies the entries it holds through `commitThrough` (what the leader committed). */
  applyReplicated(commitThrough: number): void;
}
