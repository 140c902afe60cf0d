// The peer agent's role state machine (cluster mode, docs/cluster.md): the node elects through
// the object-store lock, then leads (leader.ts) or follows (follower.ts) until that ends, and
// elects again; the highest term it has seen is kept across restarts. Writes and linearizable
// reads that reach this agent go where the current role says: this node's storage on the
// leader, the leader's Forward streams on a follower. main.ts wires it to its servers.
import fs from 'node:fs';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { parseDuration } from '../../shared/duration.js';
import type { ServerCall } from '../../shared/grpc/server.js';
import type { BatchHandler, BatchResult } from '../../shared/batch-link/serve.js';
import { BatchLink, storageLink } from '../../shared/batch-link/link.js';
import type { CallError, StreamChannel } from '../../shared/grpc/stream-channel.js';
import { PreconditionFailedError, type ObjectStore } from '../../shared/objectstore/store.js';
import { storedPosition } from '../../shared/objectstore/catalog.js';
import { termStartKey, type TermStart } from '../../shared/objectstore/layout.js';
import { Errors, EtcdError } from '../../shared/errors.js';
import * as M from '../../shared/metrics.js';
import { writeMetricsByOp } from '../../shared/metrics.js';
import { LeaderLock, newEpoch, nowNano, type HeldLock } from './lock.js';
import { StorageSide, Role, type Replicate } from './storage-side.js';
import { StateBoard, type Member } from './state.js';
import { Leadership } from './leader.js';
import { Following, sleep, type LeaderContact } from './follower.js';
import { COMMIT_DELAY_ENV, commitDelayMs } from './commit-delay.js';
import { TooFarBehindError, catchUpFromStore } from './catch-up.js';
import { PeerChannel, callForEpoch, type PeerCredentials } from './transport.js';

/** How long a request that finds no leader waits for one before failing with etcd's no-leader error. */
const ELECTION_WAIT_MS = 3000;

/** The storage op numbers forwarded writes carry, for the forwarded-write metrics. */
const METRIC_OP: Record<number, keyof typeof writeMetricsByOp | undefined> = { 1: 'put', 2: 'delete', 3: 'txn', 4: 'compact' };

/** What the peer agent's host does for it (the peer process: tells its supervisor). */
export interface PeerHost {
  /** What the agent is doing, for `kvs ctl status`. */
  reportState(detail: string): void;
  /** This node is too far behind the object store to catch up: restore the latest checkpoint. */
  tooFarBehind(why: string): void;
}

/** The node's cluster role over time: elect, lead or follow, and again. */
export class PeerNode {
  readonly storage: StorageSide;
  readonly board = new StateBoard();
  readonly lock: LeaderLock;
  leadership: Leadership | undefined;
  private following: Following | undefined;
  private contact: LeaderContact = { term: 0, at: -Infinity };
  private local: { Write: BatchLink; Lease: BatchLink; channel: StreamChannel } | undefined;
  private remote: { leader: string; Write: BatchLink; Lease: BatchLink; channel: PeerChannel } | undefined;
  private readonly ttlMs: number;
  private readonly retryMs: number;
  private readonly termFile: string;
  /** Test failpoint (commit-delay.ts); 0 unless KVS_FAILPOINT_COMMIT_DELAY_MS is set. */
  private readonly commitDelayMs = commitDelayMs();

  constructor(
    private readonly cfg: Config,
    private readonly self: Member,
    private readonly store: ObjectStore,
    private readonly creds: PeerCredentials,
    private readonly log: Logger,
    /** A connection to this node's storage (run/storage.sock, or a pipe in an embedded node). */
    private readonly toStorage: () => StreamChannel,
    private readonly host: PeerHost,
  ) {
    this.storage = new StorageSide(log);
    if (this.commitDelayMs) log.warn({ ms: this.commitDelayMs }, `test failpoint ${COMMIT_DELAY_ENV}: this node applies every commit position ${this.commitDelayMs} ms after the leader sent it`);
    // Storage may send a batch after a term ended, before it hears its new role. Unanswered, it
    // would wait for that batch forever, and so would its role change (found by chaos/).
    this.storage.on('replicate', (r: Replicate) => {
      if (!r.seed && !this.leadership?.active) this.storage.replicated(r.last, { code: status.UNAVAILABLE, message: 'etcdserver: leader changed' });
    });
    // A batch that wrote nothing (read-only Txns) is answered once the lock is surely ours.
    this.storage.on('confirm', (id: number) => {
      try {
        if (!this.leadership?.active) throw Errors.noLeader;
        this.leadership.readIndex();
        this.storage.confirmed(id);
      } catch (err) {
        this.storage.confirmed(id, { code: (err as EtcdError).code ?? status.UNAVAILABLE, message: (err as Error).message });
      }
    });
    this.lock = new LeaderLock(store);
    this.ttlMs = parseDuration(cfg.leaderLivenessTtl, 'leader-liveness-ttl');
    this.retryMs = parseDuration(cfg.followerRetryInterval, 'follower-retry-interval');
    this.termFile = path.join(cfg.dataDir, 'peer-term.json');
    this.board.onChange(() => this.followLeaderChange());
  }

  /**
   * The leader changed: writes still queued unsent for the previous one (its link was
   * reconnecting, or had not connected yet: a follower's first forwarded write as the leader
   * hands off) go to the new one at once, instead of waiting out the link's 5 s and failing
   * with no leader while another node already takes writes. Without a leader they wait.
   */
  private followLeaderChange(): void {
    if (!this.remote) return;
    const s = this.board.current;
    if (s.role === Role.FOLLOWER && s.leader) this.remoteLinks(s.leader);
    else if (s.role === Role.LEADER) {
      const { remote } = this;
      this.remote = undefined;
      const local = this.localLinks();
      remote.Write.handOver(local.Write);
      remote.Lease.handOver(local.Lease);
      remote.channel.close();
    }
  }

  async run(signal: AbortSignal): Promise<void> {
    let won: HeldLock | undefined;
    while (!signal.aborted) {
      try {
        const held = won ?? (await this.elect(signal));
        won = undefined;
        if (!held) {
          await sleep(this.retryMs, signal);
          continue;
        }
        // Leads what it won now (elect() and a takeover record the term first), or its own lock
        // from before a restart of this same data directory.
        if (held.record.nodeId === this.self.nodeId && this.seenTerm() >= held.record.term) {
          await this.lead(held, signal);
          continue;
        }
        // (Our own lock, held by this node's previous data directory, is followed like another's:
        // its term is not recorded as ours, so a later election does not take it back at once.)
        if (held.record.nodeId !== this.self.nodeId) this.seeTerm(held.record.term);
        if (this.contact.term !== held.record.term) this.contact = { term: held.record.term, at: -Infinity };
        this.following = new Following({
          self: this.self, lock: this.lock, held, store: this.store, storage: this.storage, board: this.board, creds: this.creds, log: this.log,
          maxRetries: this.cfg.followerMaxRetries, retryMs: this.retryMs, ttlMs: this.ttlMs, watchIntervalMs: this.cfg.leaderWatchIntervalSec * 1000,
          contact: this.contact, signal, commitDelayMs: this.commitDelayMs, tooFarBehind: (why) => this.host.tooFarBehind(why),
        });
        const end = await this.following.run();
        this.following = undefined;
        if (end.kind === 'won') {
          this.seeTerm(end.held.record.term);
          won = end.held;
        }
      } catch (err) {
        if (signal.aborted) break;
        this.board.update({ role: Role.UNKNOWN, leader: undefined, inSync: false, reason: `no leader: ${(err as Error).message}` });
        this.log.error({ err: (err as Error).message }, 'election failed; retrying');
        await sleep(this.retryMs, signal);
      }
    }
  }

  /**
   * Reads the lock: absent (or released, or our own from before a restart) -> take it with a
   * new term; held by another node -> that node is the leader to follow.
   */
  private async elect(signal: AbortSignal): Promise<HeldLock | undefined> {
    this.host.reportState('electing');
    // A node leads only with its storage: without it, it would hold the lock and serve nothing.
    await this.storage.whenAttached(signal);
    const cur = await this.lock.read();
    const term = Math.max(cur?.record.term ?? 0, this.seenTerm()) + 1;
    const mine = { ...this.self, term, lastSeenNano: nowNano(), epoch: newEpoch() };
    if (!cur) {
      const won = await this.lock.create(mine);
      M.electionsTotal.inc({ outcome: won ? 'won' : 'lost' });
      if (won) this.seeTerm(won.record.term);
      return won ?? this.lock.read();
    }
    // Our own lock from before a restart: taken back at once only if this data directory is the
    // one that held it (it has every write this node acknowledged). After a disk loss the node
    // restored from the object store, which may lack acknowledged writes its followers have:
    // then it waits like any node that has not heard from the leader (docs/cluster.md).
    const ours = cur.record.nodeId === this.self.nodeId && this.seenTerm() >= cur.record.term;
    if (ours || cur.record.released) {
      const won = await this.lock.replace(mine, cur.etag);
      M.electionsTotal.inc({ outcome: won ? 'won' : 'lost' });
      if (won) this.seeTerm(won.record.term);
      return won ?? this.lock.read();
    }
    return cur;
  }

  /** Leads until deposed, storage is lost, or the node stops. */
  private async lead(held: HeldLock, signal: AbortSignal): Promise<void> {
    this.board.update({ role: Role.UNKNOWN, term: held.record.term, leader: this.self, inSync: false, reason: 'taking over as leader' });
    await this.storage.whenAttached(signal);
    // What a previous leader acknowledged while this node was cut off is in the object store.
    await this.storage.setRole(Role.UNKNOWN, held.record.term);
    // Where the store's history ends now: this node catches up to exactly there, and its term
    // begins right after. Reading it again for the term's start would let a deposed leader's
    // upload that lands in between (records it never acknowledged, e.g. a WAL segment it sealed
    // on waking from a pause) into the history below the start, though this node never had
    // them: its own records at those indices would then be cut instead (found by `npm run
    // chaos -- --nemesis pause`: a follower that caught up from the store missed an
    // acknowledged write).
    const position = await storedPosition(this.store);
    try {
      await catchUpFromStore(this.store, this.storage, this.log, position);
    } catch (err) {
      if (!(err instanceof TooFarBehindError)) throw err;
      // It cannot lead without the history gc removed: it gives the lock up (another node may
      // have it all) and restores the latest checkpoint, then elects again.
      this.log.error({ err: err.message }, 'cannot lead: too far behind the object store; releasing the lock');
      await this.lock.replace({ ...held.record, released: true, lastSeenNano: nowNano() }, held.etag).catch(() => undefined);
      this.host.tooFarBehind(err.message);
      await sleep(this.retryMs, signal);
      return;
    }
    const termStart = await this.recordTermStart(held.record.term, position);
    const l = new Leadership({
      self: this.self, lock: this.lock, held, storage: this.storage, board: this.board, log: this.log,
      bufferSize: this.cfg.peerBufferSize, ttlMs: this.ttlMs, watchIntervalMs: this.cfg.leaderWatchIntervalSec * 1000, termStart,
    });
    this.leadership = l;
    this.host.reportState(`leader, term ${held.record.term}`);
    const onAbort = () => void l.handOff();
    signal.addEventListener('abort', onAbort, { once: true });
    const why = await l.run();
    signal.removeEventListener('abort', onAbort);
    this.leadership = undefined;
    this.board.update({ role: Role.UNKNOWN, leader: undefined, inSync: false, reason: 'no leader: electing', degraded: false });
    if (why === 'deposed' || why === 'store-unreachable') {
      try {
        await this.storage.setRole(Role.UNKNOWN, held.record.term);
      } catch {}
    }
  }

  /**
   * term/<term>-<start>.json, before this leader serves: its term takes the log over right after
   * `position`, where the object store's history ended when this node caught up to it. A deposed
   * leader's uploads that land later, at or past that index, are then not history
   * (shared/objectstore/wal-history.ts): it never acknowledged them, for its lock touches
   * stopped a liveness TTL before this node could take over.
   */
  private async recordTermStart(term: number, position: number): Promise<number> {
    const startIndex = BigInt(position) + 1n;
    const record: TermStart = { term, startIndex: Number(startIndex), nodeId: this.self.nodeId, createdAt: new Date().toISOString() };
    try {
      await this.store.put(termStartKey(term, startIndex), Buffer.from(JSON.stringify(record)), { ifNoneMatch: '*' });
    } catch (err) {
      if (!(err instanceof PreconditionFailedError)) throw err;
    }
    this.log.info({ term, startIndex: record.startIndex }, 'term recorded in the object store');
    return record.startIndex;
  }

  /** The highest term this node has seen, kept across restarts (a new term always exceeds it). */
  private seenTerm(): number {
    try {
      return Number(JSON.parse(fs.readFileSync(this.termFile, 'utf8')).term) || 0;
    } catch {
      return 0;
    }
  }

  private seeTerm(term: number): void {
    if (term <= this.seenTerm()) return;
    fs.writeFileSync(this.termFile, JSON.stringify({ term }));
  }

  // ---- forwarding --------------------------------------------------------------------------

  /** This node's storage streams (the leader's side of a forwarded write). */
  private localLinks(): { Write: BatchLink; Lease: BatchLink; channel: StreamChannel } {
    if (this.local) return this.local;
    const channel = this.toStorage();
    return (this.local = { Write: storageLink(channel, this.log, 'Write'), Lease: storageLink(channel, this.log, 'Lease'), channel });
  }

  /** The current leader's Forward streams (a follower's side). */
  private remoteLinks(leader: Member) {
    const epoch = this.board.current.leaderEpoch;
    const key = `${leader.peerUrl} ${epoch}`;
    if (this.remote?.leader !== key) {
      const previous = this.remote;
      const channel = new PeerChannel(leader.peerUrl, this.creds, epoch);
      const opts = { unavailable: Errors.noLeader, peerName: `the leader (${leader.nodeId})` };
      this.remote = { leader: key, channel, Write: new BatchLink(channel.batchCalls('Forward'), this.log, opts), Lease: new BatchLink(channel.batchCalls('ForwardLease'), this.log, opts) };
      if (previous) {
        previous.Write.handOver(this.remote.Write);
        previous.Lease.handOver(this.remote.Lease);
        previous.channel.close();
      }
    }
    return this.remote;
  }

  /** This node leads, in the leadership the peer call was meant for. */
  leads(call: ServerCall<unknown, unknown>): boolean {
    return this.leadership !== undefined && callForEpoch(call, this.leadership.epoch);
  }

  /** Agent.Forward: the gateway's writes, to the leader (or, on the leader, to storage). */
  forwardHandler(kind: 'Write' | 'Lease'): BatchHandler {
    return (op, body, done, authRevision, traceParent) => {
      if (!this.board.hasLeader) {
        void this.board.whenLeader(ELECTION_WAIT_MS).then(() => this.forwardHandler(kind)(op, body, done, authRevision, traceParent));
        return;
      }
      const s = this.board.current;
      if (s.role === Role.LEADER) return pipe(this.localLinks()[kind].call(op, body, authRevision, traceParent), done);
      if (s.role !== Role.FOLLOWER || !s.leader) return done(Errors.noLeader);
      const metricOp = kind === 'Write' ? METRIC_OP[op] : undefined;
      const started = performance.now();
      pipe(this.remoteLinks(s.leader)[kind].call(op, body, authRevision, traceParent), (r) => {
        if (metricOp && r.code === 0) {
          M.forwardedWritesTotal.inc({ op: metricOp });
          M.forwardDuration.observe({ op: metricOp }, (performance.now() - started) / 1000);
        }
        done(r);
      });
    };
  }

  /** Peer.Forward on the leader: into this node's storage. */
  leaderHandler(kind: 'Write' | 'Lease'): BatchHandler {
    return (op, body, done, authRevision, traceParent) => {
      if (!this.leadership) return done(Errors.noLeader);
      const leadership = this.leadership;
      // The follower answers once it has applied the write: its commit notice leaves now.
      pipe(this.localLinks()[kind].call(op, body, authRevision, traceParent), (r) => {
        leadership.sendCommitNotice();
        done(r);
      });
    };
  }

  /** The leader's committed position for a linearizable read here. */
  async readIndex(): Promise<{ index: number; revision: number; term: number }> {
    // During a short election (or a leader's restart) the read waits for the next leader.
    const deadline = performance.now() + ELECTION_WAIT_MS;
    for (;;) {
      try {
        return await this.readIndexOnce();
      } catch (err) {
        const left = deadline - performance.now();
        if ((err as EtcdError).message !== Errors.noLeader.message || left <= 0) throw err;
        await this.board.whenLeader(left);
        await sleep(Math.min(100, left));
      }
    }
  }

  private async readIndexOnce(): Promise<{ index: number; revision: number; term: number }> {
    if (this.leadership) return this.leadership.readIndex();
    const s = this.board.current;
    if (s.role !== Role.FOLLOWER || !s.leader) throw Errors.noLeader;
    const { channel } = this.remoteLinks(s.leader);
    return channel.getRevision(5000).then(
      (r) => ({ index: Number(r.index), revision: Number(r.revision), term: Number(r.term) }),
      (err: CallError) => {
        throw err.code === status.UNAVAILABLE || err.code === status.DEADLINE_EXCEEDED ? Errors.noLeader : new EtcdError(err.code, err.details);
      },
    );
  }

  close(): void {
    this.local?.Write.close();
    this.local?.Lease.close();
    this.local?.channel.close();
    this.remote?.Write.close();
    this.remote?.Lease.close();
    this.remote?.channel.close();
  }
}

function pipe(p: Promise<Buffer>, done: (r: BatchResult) => void): void {
  p.then(
    (body) => done({ body, code: 0, message: '' }),
    (err: EtcdError) => done({ code: err.code ?? status.UNAVAILABLE, message: err.message }),
  );
}
