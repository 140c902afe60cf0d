// Storage's side of cluster mode: one long-lived `Agent.Attach` stream to this node's peer
// agent (<data-dir>/run/peer.sock). Down it come the role (leader, follower, or none while
// electing) and, on a follower, the leader's WAL entries with the commit position; up it go,
// on a leader, each durable batch (answered once it may be acknowledged) and, on a follower,
// what is fsynced and applied (the ACKs the leader waits for).
//
// The stream breaking means the peer agent restarted: nothing is acknowledged without it, so
// a leader's batch in flight fails (outcome unknown) and the role is `none` until it is back.
//
// A follower below the free-space floor (disk-space.ts) takes no more entries: it detaches
// (the peer agent then drops the leader's stream, and the leader counts this node as
// disconnected) and attaches again by itself once the space is back, then catches up.
import type { MethodDefinition } from '@grpc/grpc-js';
import { service } from '../../shared/proto/index.js';
import type { H2Stream, StreamChannel } from '../../shared/grpc/stream-channel.js';
import { Role } from '../../shared/membership.js';
import { EtcdError, Errors } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { decodeFrames, encodeFrames, type WalRecord } from '../../shared/wal/frame.js';
import type { Engine } from './engine.js';
import { FreeSpaceError, mib } from './disk-space.js';
import { Stage, stages } from '../../shared/stages.js';

/**
 * On our own HTTP/2 stream (shared/grpc/stream-channel.ts), as the hop to storage: a cluster put
 * crosses this stream twice on the leader and twice on each follower.
 */
const ATTACH = service('kvs.peer.Agent').Attach as MethodDefinition<object, AgentMessage>;
type AttachStream = H2Stream<object, AgentMessage>;
/** How often a follower detached for lack of disk space checks whether it is back. */
const SPACE_POLL_MS = 500;

type U64 = number | { toNumber(): number };
const n = (v: U64 | undefined | null): number => (v == null ? 0 : typeof v === 'number' ? v : v.toNumber());

interface AgentMessage {
  role?: { role: number; term: U64; degraded: boolean; termStart: U64; dropStaged: boolean };
  replicated?: { through: U64; uploadFirst: boolean; code: number; message: string };
  confirmed?: { id: U64; code: number; message: string };
  entries?: { first: U64; last: U64; frames: Buffer; commitThrough: U64; committed: boolean };
  placement?: { followersElsewhere: boolean };
}

interface Pending {
  last: number;
  resolve(): void;
  reject(err: Error): void;
}

export interface ClusterHooks {
  /** Leader, degraded: upload every WAL record through `through` to the object store. */
  uploadThrough(through: number): Promise<void>;
  /** The node became leader (after its staged entries were applied). */
  /** `termStart`: where its term begins in the object store (uploads continue from there). */
  onLeader(term: number, termStart: number): void;
  /** The node stopped being leader. */
  onNotLeader(): void;
}

export class PeerAttach {
  private stream: AttachStream | undefined;
  /** Leader: the batches sent and not yet answered, oldest first (the engine's flights). */
  private pending: Pending[] = [];
  /** Leader: the Confirm in flight (a batch that wrote nothing waits for it). */
  private confirming: { id: number; resolve(): void; reject(err: Error): void } | undefined;
  private confirmId = 0;
  /** Messages are handled one at a time: a role change waits for the batch in flight. */
  private chain: Promise<void> = Promise.resolve();
  private closed = false;
  private retryMs = 50;
  /** Follower below the free-space floor: detached, polling for space (see detachForSpace). */
  private spaceWait: NodeJS.Timeout | undefined;

  constructor(
    /** To the peer agent's Agent service (run/peer.sock, or a pipe in an embedded node); closed with this. */
    private readonly channel: StreamChannel,
    private readonly engine: Engine,
    private readonly hooks: ClusterHooks,
    private readonly log: Logger,
    /** --peer-buffer-size: how many recent entries the leader's peer agent keeps. */
    private readonly bufferSize = 10_000,
  ) {
    engine.replicate = {
      send: (first, last, frames, revision) => this.replicate(first, last, frames, revision),
      durable: (through, err) => void this.stream?.write({ durable: { through, error: err ? err.message : '' } }),
      confirm: () => this.confirm(),
    };
    this.open();
  }

  private open(): void {
    if (this.closed || this.spaceWait) return;
    const stream = this.channel.stream(ATTACH);
    this.stream = stream;
    const e = this.engine;
    stream.write({ hello: { appliedIndex: e.appliedIndex, lastIndex: e.lastIndex, revision: e.revision } });
    stream.on('data', (m: AgentMessage) => {
      this.retryMs = 50;
      if (m.replicated) return this.onReplicated(m.replicated);
      if (m.confirmed) return this.onConfirmed(m.confirmed);
      if (m.placement) return void (this.engine.followersElsewhere = m.placement.followersElsewhere);
      this.chain = this.chain.then(() => this.handle(stream, m)).catch((err: Error) => {
        if (err instanceof FreeSpaceError) return this.detachForSpace(stream, err);
        // A follower that cannot append what its leader sent (a gap, ENOSPC above the floor)
        // breaks the stream: the peer agent reconnects it from the applied position.
        this.log.error({ err: err.message }, 'replicated entries not taken; reconnecting to the peer agent');
        stream.cancel();
      });
    });
    const broken = (err?: Error) => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      this.failPending('kvs: the peer agent went away before the write was replicated');
      this.chain = this.chain.then(async () => {
        const wasLeader = this.engine.role === 'leader';
        await this.engine.becomeFollower('none', 0);
        if (wasLeader) this.hooks.onNotLeader();
      });
      if (this.closed || this.spaceWait) return; // detachForSpace attaches again
      this.log.warn({ err: err?.message }, 'lost the peer agent; writes wait for it');
      setTimeout(() => this.open(), this.retryMs).unref();
      this.retryMs = Math.min(this.retryMs * 2, 1000);
    };
    stream.on('error', broken);
    stream.on('end', () => broken());
  }

  private async handle(stream: AttachStream, m: AgentMessage): Promise<void> {
    const e = this.engine;
    if (m.role) {
      const term = n(m.role.term);
      if (m.role.role === Role.LEADER) {
        if (e.role !== 'leader') {
          e.becomeLeader(term);
          this.log.info({ term, appliedIndex: e.appliedIndex, revision: e.revision }, 'storage is the leader\'s: taking writes');
          this.seed(stream);
          this.hooks.onLeader(term, n(m.role.termStart));
        }
      } else {
        const wasLeader = e.role === 'leader';
        await e.becomeFollower(m.role.role === Role.FOLLOWER ? 'follower' : 'none', term, m.role.dropStaged);
        if (wasLeader) this.hooks.onNotLeader();
      }
      stream.write({ progress: { durableThrough: e.lastIndex, appliedThrough: e.appliedIndex, revision: e.revision } });
      return;
    }
    if (m.entries) {
      if (this.spaceWait) return; // sent before this node detached for lack of space
      const x = m.entries;
      const records = x.frames?.length ? decodeFrames(x.frames).records : [];
      if (records.length) stages?.stamp(Stage.FOLLOWER_STORAGE_RECEIVE, n(x.last));
      const commit = x.committed ? n(x.last) : n(x.commitThrough);
      const progress = () => ({ progress: { durableThrough: e.lastIndex, appliedThrough: e.appliedIndex, revision: e.revision } });
      if (!records.length || x.committed) {
        // A commit position alone, or entries caught up from the object store: applied before
        // the progress, which the peer agent awaits as "applied" (StorageSide.committedEntries).
        e.appendReplicated(records, commit);
        stream.write(progress());
        return;
      }
      // A leader's batch: the leader waits for this append's ACK, not for the apply of what the
      // batch says is committed (an LMDB transaction and the watchers' feed). The ACK leaves
      // first, the apply once it is on its way (docs/perf/cluster.md#levers-on-the-cluster-path,
      // "ACK before apply").
      e.appendReplicated(records);
      const sent = new Promise<void>((resolve) => {
        const late = setTimeout(resolve, 20); // a stream that broke may never call back
        stream.write(progress(), () => {
          clearTimeout(late);
          setImmediate(resolve);
        });
      });
      stages?.stamp(Stage.FOLLOWER_PROGRESS_SENT, e.lastIndex);
      await sent;
      e.applyReplicated(commit);
    }
  }

  /** Leader, at election: the recent entries of the WAL, for followers that lack them. */
  private seed(stream: AttachStream): void {
    const wal = this.engine.wal;
    if (wal.isEmpty) return;
    const last = wal.lastIndex;
    let from = last - BigInt(this.bufferSize) + 1n;
    if (from < wal.firstIndex) from = wal.firstIndex;
    let chunk: WalRecord[] = [];
    let bytes = 0;
    const send = () => {
      stream.write({ replicate: { first: Number(chunk[0]!.index), last: Number(chunk[chunk.length - 1]!.index), frames: encodeFrames(chunk), seed: true } });
      chunk = [];
      bytes = 0;
    };
    for (const rec of wal.readFrom(from)) {
      chunk.push({ index: rec.index, payload: Buffer.from(rec.payload) });
      bytes += rec.payload.length;
      if (bytes > 4 * 1024 * 1024) send();
    }
    if (chunk.length) send();
  }

  /** Leader: resolves once the batch through `last` may be acknowledged (sent before its fsync). */
  private replicate(first: number, last: number, frames: Buffer, revision: number): Promise<void> {
    return new Promise((resolve, reject) => {
      if (!this.stream) return reject(new Error('no peer agent'));
      this.pending.push({ last, resolve, reject });
      this.stream.write({ replicate: { first, last, frames, revision } });
    });
  }

  /**
   * The agent answers batches in order: "replicated through N" acknowledges every batch that
   * ends at or before N; a refusal of the batch ending at N refuses every batch after it too
   * (each was executed on top of it).
   */
  private onReplicated(r: NonNullable<AgentMessage['replicated']>): void {
    const through = n(r.through);
    if (r.code) return this.failFrom(through, new EtcdError(r.code, r.message));
    if (!r.uploadFirst) {
      while (this.pending.length && this.pending[0].last <= through) {
        const p = this.pending.shift()!;
        stages?.stamp(Stage.STORAGE_REPLICATED, p.last);
        p.resolve();
      }
      return;
    }
    // Degraded: the object store is the replica. The agent answers again after the upload,
    // checking then that this node still holds the lock.
    const p = this.pending.find((q) => q.last >= through);
    if (!p) return;
    const stream = this.stream;
    this.hooks.uploadThrough(p.last).then(
      () => stream?.write({ uploaded: { through: p.last } }),
      (err: Error) => {
        if (this.pending.includes(p)) this.failFrom(p.last, err); // else answered meanwhile
      },
    );
  }

  /** Refuses the batch ending at or after `through` that is still waiting, and every later one. */
  private failFrom(through: number, err: Error): void {
    const k = this.pending.findIndex((p) => p.last >= through);
    if (k < 0) return;
    for (const p of this.pending.splice(k)) p.reject(err);
  }

  /**
   * Follower below the free-space floor: one line saying why, then detached until the space is
   * back. Detached, this node neither ACKs (the leader drops it and uploads every batch before
   * acknowledging it, as for any disconnected follower) nor follows or elects (the peer agent
   * waits for its storage); serializable reads keep being served. Staying attached without
   * ACKing would not do: the leader would drop the silent follower every 3 s and admit it again.
   */
  private detachForSpace(stream: AttachStream, err: FreeSpaceError): void {
    if (this.spaceWait || this.closed) return;
    this.log.error(
      { dir: err.dir, freeBytes: err.freeBytes, minFreeBytes: err.minFreeBytes },
      `${mib(err.freeBytes)} free on the filesystem of ${err.dir}, below the floor of ${mib(err.minFreeBytes)} ` +
        '(the database writes through a memory map): this follower is taking no replicated entries and sends no ACKs ' +
        '(the leader counts it as disconnected) until space is freed; it then catches up by itself',
    );
    this.spaceWait = setInterval(() => {
      if (this.engine.writesRefused()) return;
      clearInterval(this.spaceWait);
      this.spaceWait = undefined;
      this.log.info({ dir: err.dir }, 'free space is back above the floor: following the leader again');
      this.engine.feed.setRefused('', this.engine.revision, this.engine.appliedIndex);
      this.open();
    }, SPACE_POLL_MS);
    this.engine.feed.setRefused(err.message, this.engine.revision, this.engine.appliedIndex);
    stream.cancel();
    if (this.stream && this.stream !== stream) this.stream.cancel();
  }

  /** Leader: resolves once the peer agent confirmed this node still leads. */
  private confirm(): Promise<void> {
    return new Promise((resolve, reject) => {
      if (!this.stream) return reject(Errors.noLeader);
      const id = ++this.confirmId;
      this.confirming = { id, resolve, reject };
      this.stream.write({ confirm: { id } });
    });
  }

  private onConfirmed(c: NonNullable<AgentMessage['confirmed']>): void {
    const p = this.confirming;
    if (!p || n(c.id) !== p.id) return;
    this.confirming = undefined;
    if (c.code) p.reject(new EtcdError(c.code, c.message));
    else p.resolve();
  }

  private failPending(message: string): void {
    const err = new Error(message);
    for (const p of this.pending.splice(0)) p.reject(err);
    const c = this.confirming;
    this.confirming = undefined;
    c?.reject(Errors.noLeader);
  }

  close(): void {
    this.closed = true;
    clearInterval(this.spaceWait);
    this.failPending('kvs: storage is stopping');
    this.stream?.end();
    this.channel.close();
  }
}
