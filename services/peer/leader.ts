// A leader's term (docs/cluster.md): streams every durable batch of its storage to the
// connected followers, answers storage once the batch may be acknowledged, keeps recent entries
// for followers catching up, and keeps proving it still holds the lock.
//
// A batch may be acknowledged when every connected follower has fsynced it, and
//  - no member of this term is disconnected (the followers' ACKs are the proof that nobody
//    else can take over), or
//  - some member is disconnected (or there is none): the batch is in the object store first
//    (the store is then the replica the disconnected one will read), and the last successful
//    lock touch is younger than the liveness TTL minus a margin (the disconnected one can take
//    over only after it saw the lock unchanged that long).
// A refused touch means deposed: everything in flight fails and the term ends.
//
// One file over 500 lines on purpose: the pending batches, the followers' ACKs, the catch-up ring
// and the lock touches are one term's state, and every rule above reads all of them at once.
import type { ServerCall } from '../../shared/grpc/server.js';
import { status } from '@grpc/grpc-js';
import type { Logger } from '../../shared/log.js';
import * as M from '../../shared/metrics.js';
import { Errors } from '../../shared/errors.js';
import { decodeFrames, encodeFrames } from '../../shared/wal/frame.js';
import { nowNano, type HeldLock, type LeaderLock } from './lock.js';
import { n, Role, type Progress, type Replicate, type StorageSide } from './storage-side.js';
import type { Member, StateBoard } from './state.js';
import { Stage, stages } from '../../shared/stages.js';

export interface LeaderOptions {
  self: Member;
  lock: LeaderLock;
  held: HeldLock;
  storage: StorageSide;
  board: StateBoard;
  log: Logger;
  bufferSize: number;
  ttlMs: number;
  watchIntervalMs: number;
  /** Where this term begins in the object store (recorded before leading). */
  termStart: number;
}

/**
 * Lock touches while a member is disconnected: the spec's 2 s, or a third of the liveness TTL
 * when that is shorter. A disconnected follower takes over once it has seen the lock unchanged
 * for the TTL, so touches further apart than the TTL let it take over from a live leader, and a
 * leader acknowledges only within TTL minus a third of its last touch (fresh()).
 */
const TOUCH_MS = 2000;
/** Heartbeats to followers, which answer each with an ACK. */
const HEARTBEAT_MS = 500;
/** A follower silent this long counts as disconnected. */
const ACK_TIMEOUT_MS = 3000;
/** A tick this late (twice its interval) means the process was paused: see catchUpTimers(). */
const LATE_TICK_MS = 2 * HEARTBEAT_MS;
/** A member disconnected this long is forgotten (see follower.ts: FAST_TAKEOVER_WINDOW_MS). */
const FORGET_MS = 30_000;
/**
 * How long a commit notice may wait for the next batch, which carries `commitThrough` anyway:
 * under a steady write load followers then get one message per batch instead of two. It is sent
 * at once when something on a follower waits for it (a forwarded write, a linearizable read).
 */
const COMMIT_NOTICE_MS = 5;

interface Chunk {
  first: number;
  last: number;
  frames: Buffer;
}

interface FollowerConn {
  member: Member;
  call: ServerCall<any, unknown>;
  durableThrough: number;
  lastAckAt: number;
  /**
   * It has held everything committed at least once. Until then it is not waited for (a follower
   * catching up on a long backlog would stall every write) and counts as disconnected.
   */
  caughtUp: boolean;
}

interface Batch extends Chunk {
  revision: number;
  since: number;
  /** This node's own fsync of it returned (storage sends a batch before its fsync). */
  durable: boolean;
  uploaded: boolean;
  askedUpload: boolean;
}

/**
 * `store-unreachable`: a batch asked to go to the object store first did not get there within
 * twice the TTL, or got there but could not be acknowledged (the lock no longer provably this
 * node's); the term ends so that the next one (this node's or another's) starts after what the
 * store holds, and a late upload of that batch is not history (wal-history.ts).
 */
export type LeaderEnd = 'deposed' | 'stopped' | 'storage-lost' | 'store-unreachable';

export class Leadership {
  readonly term: number;
  private held: HeldLock;

  /** The leadership's epoch, from the lock this node won (lock.ts). */
  get epoch(): string {
    return this.held.record.epoch ?? '';
  }
  private readonly followers = new Map<string, FollowerConn>();
  /** Members of this term that are gone, and since when (monotonic ms). */
  private readonly disconnected = new Map<string, number>();
  private ring: Chunk[] = [];
  private ringEntries = 0;
  private ringTrimmed = false;
  private lastIndex = 0;
  committedThrough = 0;
  committedRevision = 0;
  /**
   * Storage's batches not yet answered, oldest first: a leader's storage sends the next batch
   * while the previous one waits for its ACKs (services/storage/engine/leader-pipeline.ts, PIPELINE_DEPTH).
   * They are answered in order; one that fails fails every batch after it.
   */
  private pending: Batch[] = [];
  /**
   * After a batch was dropped: storage sends its next batch from this index. Batches it sent
   * before it learned of the drop (executed on top of the dropped one) are ignored.
   */
  private resumeAt: number | undefined;
  /** What storage was last told of where the followers run (sendPlacement). */
  private placement: boolean | undefined;
  private lastTouchOk = performance.now();
  private touching = false;
  private lastTouchAttempt = 0;
  private timer: NodeJS.Timeout | undefined;
  /** A commit notice not yet sent (COMMIT_NOTICE_MS). */
  private notice: NodeJS.Timeout | undefined;
  /** When tick() last ran (monotonic ms): a long gap means this process was paused or starved. */
  private lastTickAt = performance.now();
  private ended: ((why: LeaderEnd) => void) | undefined;
  private done = false;
  private started = false;
  /**
   * Storage took the role and this term's positions are known (run()). Before that the lock is
   * ours but the committed position is not: a ReadIndex answered then would say 0, and a read
   * waiting for 0 misses what the previous leader acknowledged (found by chaos/: a stale get on
   * a follower of a leader that had just taken over).
   */
  private serving = false;
  private readonly listeners: [string, (...a: any[]) => void][] = [];

  constructor(private readonly o: LeaderOptions) {
    this.held = o.held;
    this.term = o.held.record.term;
  }

  /** Takes the role (storage applies its staged entries first); resolves when the term ends. */
  async run(): Promise<LeaderEnd> {
    const { storage, log } = this.o;
    const ended = new Promise<LeaderEnd>((resolve) => (this.ended = resolve));
    this.started = true;
    this.on('replicate', (r: Replicate) => this.onReplicate(r));
    this.on('durable', (through: number, error: string) => {
      if (error) {
        const b = this.pending.find((p) => p.last >= through);
        if (b) this.dropPending(b, `kvs: the leader could not write the batch to its WAL: ${error}`);
        return;
      }
      for (const b of this.pending) if (b.last <= through) b.durable = true;
      this.evaluate();
    });
    this.on('uploaded', (through: number) => {
      for (const b of this.pending) if (b.last <= through) b.uploaded = true;
      this.evaluate();
    });
    this.on('detached', () => this.end('storage-lost'));
    let p: Progress;
    try {
      p = await storage.setRole(Role.LEADER, this.term, true, this.o.termStart);
    } catch {
      this.end('storage-lost');
      return ended;
    }
    this.lastIndex = p.durableThrough;
    this.committedThrough = p.appliedThrough;
    this.committedRevision = p.revision;
    this.serving = true;
    this.publishState();
    M.replicationDegraded.set(1);
    log.info({ term: this.term, index: this.committedThrough, revision: this.committedRevision }, 'leading');
    this.timer = setInterval(() => this.tick(), HEARTBEAT_MS);
    this.timer.unref();
    return ended;
  }

  /** Between run() and end(): storage's batches are this term's to answer. */
  get active(): boolean {
    return this.started && !this.done;
  }

  private on(event: string, fn: (...a: any[]) => void): void {
    this.o.storage.on(event, fn);
    this.listeners.push([event, fn]);
  }

  /** Ends the term: in-flight work fails, followers are cut off (they reconnect or elect). */
  end(why: LeaderEnd): void {
    if (this.done) return;
    this.done = true;
    clearInterval(this.timer);
    this.noticeSent();
    for (const [e, fn] of this.listeners) this.o.storage.off(e, fn);
    if (this.pending.length) {
      // Refuses the oldest, and so every batch after it.
      const msg = why === 'deposed' ? 'etcdserver: leader changed' : 'etcdserver: no leader';
      this.o.storage.replicated(this.pending[0].last, { code: status.UNAVAILABLE, message: msg });
      this.pending = [];
    }
    for (const f of this.followers.values()) f.call.end();
    this.followers.clear();
    M.replicationDegraded.set(0);
    this.o.log.warn({ term: this.term, why }, 'no longer leading');
    this.ended?.(why);
  }

  /** Graceful hand-off: writes stop, followers catch up, the lock is released, they are told. */
  async handOff(): Promise<void> {
    if (this.done) return;
    const { storage, lock, log } = this.o;
    try {
      await storage.setRole(Role.UNKNOWN, this.term);
    } catch {}
    const deadline = performance.now() + 3000;
    while (performance.now() < deadline && [...this.followers.values()].some((f) => f.caughtUp && f.durableThrough < this.lastIndex)) {
      await new Promise((r) => setTimeout(r, 20));
    }
    try {
      const released = await lock.replace({ ...this.held.record, released: true, lastSeenNano: nowNano() }, this.held.etag);
      if (released) {
        for (const f of this.followers.values()) f.call.write({ term: this.term, commitThrough: this.committedThrough, leaving: true });
        log.info({ term: this.term }, 'released the leader lock; followers take over');
      }
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not release the leader lock; followers take over after the liveness TTL');
    }
    this.end('stopped');
  }

  // ---- replication -------------------------------------------------------------------------

  private onReplicate(r: Replicate): void {
    if (this.done) return;
    if (this.resumeAt !== undefined && !r.seed) {
      if (r.first !== this.resumeAt) return; // sent before storage dropped it (it fails there)
      this.resumeAt = undefined;
    }
    this.remember({ first: r.first, last: r.last, frames: r.frames });
    this.lastIndex = Math.max(this.lastIndex, r.last);
    if (r.seed) return;
    stages?.stamp(Stage.PEER_LEADER_RECEIVE, r.last);
    this.pending.push({ first: r.first, last: r.last, frames: r.frames, revision: r.revision, since: performance.now(), durable: false, uploaded: false, askedUpload: false });
    const msg = { term: this.term, first: r.first, last: r.last, frames: r.frames, commitThrough: this.committedThrough };
    this.noticeSent();
    for (const f of this.followers.values()) f.call.write(msg);
    stages?.stamp(Stage.PEER_LEADER_SENT, r.last);
    this.evaluate();
  }

  private remember(c: Chunk): void {
    this.ring.push(c);
    this.ringEntries += c.last - c.first + 1;
    while (this.ring.length > 1 && this.ringEntries - (this.ring[0].last - this.ring[0].first + 1) >= this.o.bufferSize) {
      const old = this.ring.shift()!;
      this.ringEntries -= old.last - old.first + 1;
      this.ringTrimmed = true;
    }
  }

  private get degraded(): boolean {
    if (this.followers.size === 0 || this.disconnected.size > 0) return true;
    for (const f of this.followers.values()) if (!f.caughtUp) return true;
    return false;
  }

  /** Why replication is degraded, as the followers' consoles show it ('' when it is not). */
  private degradedReason(): string {
    const why = [...this.disconnected.keys()].map((id) => `${id} disconnected`);
    for (const f of this.followers.values()) if (!f.caughtUp) why.push(`${f.member.nodeId} catching up`);
    if (why.length === 0 && this.followers.size === 0) why.push('no follower connected');
    return why.join(', ');
  }

  /** The lock is ours for sure: see the header. */
  fresh(): boolean {
    const margin = this.o.ttlMs / 3;
    const age = performance.now() - this.lastTouchOk;
    return this.degraded ? age < this.o.ttlMs - margin : age < this.o.watchIntervalMs + this.o.ttlMs - margin;
  }

  /**
   * After a pause (SIGSTOP, a starved VM), I/O queued meanwhile — a follower's ACK, a read — is
   * handled before the timers run, on state from before the pause: followers that fell silent
   * still count as connected, a touch as recent. Another node may have taken over meanwhile.
   * So before anything is acknowledged or answered, the timers' checks run first when they are
   * late: silent followers are dropped, and then only a fresh touch can prove the lock.
   */
  private catchUpTimers(): void {
    if (performance.now() - this.lastTickAt > LATE_TICK_MS) this.tick();
  }

  /** Answers the batches that may be acknowledged now, oldest first. */
  private evaluate(): void {
    for (let b = this.pending[0]; b && this.evaluateOne(b); b = this.pending[0]);
  }

  /** Whether the oldest batch, `b`, was committed (the next one may be then). */
  private evaluateOne(b: Batch): boolean {
    if (!b.durable || this.done) return false;
    this.catchUpTimers();
    if (this.pending[0] !== b || this.done) return false;
    for (const f of this.followers.values()) if (f.caughtUp && f.durableThrough < b.last) return false;
    if (this.degraded && !b.uploaded) {
      // Only while the lock is surely ours: a deposed leader must not add to the uploaded WAL.
      if (!b.askedUpload && this.fresh()) {
        b.askedUpload = true;
        this.o.storage.replicated(b.last, { uploadFirst: true });
      }
      if (!b.askedUpload) this.failIfStale(b);
      else if (performance.now() - b.since > 2 * this.o.ttlMs) {
        // Its upload may still land, so its indices must not be reused in this term: it fails,
        // and the term ends (a new term starts after what the store holds).
        this.dropPending(b, 'etcdserver: no leader (the leader cannot reach the object store)');
        this.end('store-unreachable');
      }
      return false;
    }
    if (!this.fresh()) {
      this.failIfStale(b);
      return false;
    }
    this.commit(b);
    return true;
  }

  /** Waits for a touch (tick); past twice the TTL the batch fails. */
  private failIfStale(b: Batch): void {
    if (performance.now() - b.since <= 2 * this.o.ttlMs) return;
    this.dropPending(b, 'etcdserver: no leader (the leader cannot reach the object store to prove it still leads)');
    // Asked to go to the object store first, it may be there (or land later): its indices must
    // not be reused in this term, where the resent batch would pass for uploaded and a node
    // catching up from the store would get this one instead.
    if (b.askedUpload) this.end('store-unreachable');
  }

  /**
   * The batch fails, and every batch after it (executed on top of it): never acknowledged, and
   * gone from every log that holds them.
   */
  private dropPending(b: Batch, message: string): void {
    const k = this.pending.indexOf(b);
    if (k < 0) return;
    this.pending.splice(k);
    this.resumeAt = b.first;
    // Storage drops the batch from its WAL: so does the buffer (the next batch reuses the indices).
    while (this.ring.length && this.ring[this.ring.length - 1].last >= b.first) {
      const c = this.ring.pop()!;
      this.ringEntries -= c.last - c.first + 1;
    }
    this.lastIndex = b.first - 1;
    this.o.storage.replicated(b.last, { code: status.UNAVAILABLE, message });
    // Followers may hold the batch: they are cut off, so that they drop it with this node's WAL.
    // At once, not when their streams end: an ACK still on its way would count, for the batch
    // storage sends next at the same indices, entries the follower holds from this one.
    for (const f of [...this.followers.values()]) this.drop(f, 'it may hold a batch that was dropped');
  }

  private commit(b: Batch): void {
    this.pending.shift();
    // The next batch's time to be acknowledged starts now, as it would with one in flight:
    // waiting behind this one must not use it up.
    if (this.pending.length) this.pending[0].since = performance.now();
    this.committedThrough = b.last;
    this.committedRevision = b.revision;
    this.o.storage.replicated(b.last);
    stages?.stamp(Stage.PEER_LEADER_REPLICATED, b.last);
    if (!this.notice) this.notice = setTimeout(this.sendCommitNotice, COMMIT_NOTICE_MS);
  }

  /** Tells the followers what is committed now, unless a message did since the last commit. */
  readonly sendCommitNotice = (): void => {
    if (!this.notice || this.done) return;
    this.noticeSent();
    const msg = { term: this.term, commitThrough: this.committedThrough };
    for (const f of this.followers.values()) f.call.write(msg);
  };

  /** A message carrying the current `commitThrough` is being sent: no separate notice is due. */
  private noticeSent(): void {
    if (!this.notice) return;
    clearTimeout(this.notice);
    this.notice = undefined;
  }

  // ---- followers ---------------------------------------------------------------------------

  /** Peer.Follow: a follower's stream. */
  serve(call: ServerCall<any, unknown>): void {
    let conn: FollowerConn | undefined;
    call.on('data', (m: { hello?: { member: Member; fromIndex: unknown }; ack?: { durableThrough: unknown } }) => {
      if (this.done) return;
      if (m.hello && !conn) {
        if (!this.serving) {
          // Its positions are not known yet: it would send the follower to the object store.
          call.emit('error', { code: status.UNAVAILABLE, details: 'kvs: the leader is taking over; try again' });
          return;
        }
        // A Hello without a member cannot be admitted (nor logged): found by the port fuzzer,
        // admit() threw on it and the peer process exited.
        if (!m.hello.member?.nodeId) {
          call.emit('error', { code: status.INVALID_ARGUMENT, details: 'kvs: Follow: a Hello must name its member (node_id)' });
          return;
        }
        conn = this.admit(call, m.hello.member, n(m.hello.fromIndex as number));
        return;
      }
      if (m.ack && conn) {
        conn.durableThrough = Math.max(conn.durableThrough, n(m.ack.durableThrough as number));
        conn.lastAckAt = performance.now();
        if (stages) stages.stamp(Stage.PEER_LEADER_ACK, conn.durableThrough, undefined, stages.label(conn.member.nodeId));
        // Caught up: it holds everything committed. (Not "everything this leader has": under a
        // steady load a batch is always in flight, and one not waited for would trail it forever.)
        if (!conn.caughtUp && conn.durableThrough >= this.committedThrough) {
          conn.caughtUp = true;
          this.o.log.info({ follower: conn.member.nodeId, index: conn.durableThrough }, 'follower caught up');
          this.publishState();
        }
        this.evaluate();
      }
    });
    const gone = () => {
      if (!conn || this.followers.get(conn.member.nodeId) !== conn) return;
      this.drop(conn, 'stream closed');
    };
    call.on('end', () => {
      call.end();
      gone();
    });
    call.on('error', gone);
    call.on('cancelled', gone);
  }

  private admit(call: ServerCall<any, unknown>, member: Member, from: number): FollowerConn | undefined {
    const { log } = this.o;
    const ringFirst = this.ring.length ? this.ring[0].first : this.lastIndex + 1;
    if (from > this.lastIndex + 1 || from < ringFirst) {
      const reason = from > this.lastIndex + 1 ? 'stream_gap' : this.ringTrimmed ? 'ring_buffer_miss' : 'behind_leader_start';
      log.info({ follower: member.nodeId, from, ringFirst, lastIndex: this.lastIndex, reason }, 'follower must catch up from the object store first');
      call.write({ term: this.term, commitThrough: this.committedThrough, resync: reason });
      call.end();
      return undefined;
    }
    const old = this.followers.get(member.nodeId);
    if (old) old.call.end();
    const conn: FollowerConn = { member, call, durableThrough: from - 1, lastAckAt: performance.now(), caughtUp: from - 1 >= this.committedThrough };
    this.followers.set(member.nodeId, conn);
    this.disconnected.delete(member.nodeId);
    log.info({ follower: member.nodeId, from }, 'follower connected');
    call.write({ term: this.term, commitThrough: this.committedThrough, members: this.members(), membersChanged: true, degraded: this.degradedReason() });
    // What it lacks, from the buffer (the first chunk cut at `from`), then the live stream.
    for (const c of this.ring) {
      if (c.last < from) continue;
      const frames = c.first >= from ? c.frames : encodeFrames(decodeFrames(c.frames).records.filter((r) => r.index >= BigInt(from)));
      call.write({ term: this.term, first: Math.max(c.first, from), last: c.last, frames, commitThrough: this.committedThrough });
    }
    this.publishState();
    return conn;
  }

  private drop(conn: FollowerConn, why: string): void {
    this.followers.delete(conn.member.nodeId);
    this.disconnected.set(conn.member.nodeId, performance.now());
    conn.call.end();
    this.o.log.warn({ follower: conn.member.nodeId, why }, 'follower disconnected; batches go to the object store first until it is back');
    this.publishState();
    this.evaluate();
    void this.touch();
  }

  members(): Member[] {
    return [this.o.self, ...[...this.followers.values()].map((f) => f.member)];
  }

  private publishState(): void {
    const why = this.degradedReason();
    this.o.board.update({ role: Role.LEADER, term: this.term, leader: this.o.self, members: this.members(), inSync: true, reason: '', degraded: this.degraded, leaderDegraded: why });
    M.replicationDegraded.set(this.degraded ? 1 : 0);
    const msg = { term: this.term, commitThrough: this.committedThrough, members: this.members(), membersChanged: true, degraded: why };
    for (const f of this.followers.values()) f.call.write(msg);
    this.sendPlacement();
  }

  /**
   * Tells storage whether a connected follower runs on another machine (or one that does not
   * say): there a second batch in flight fills the leader's wait for the network, where on this
   * machine it would take CPU the followers need (--write-pipeline auto;
   * docs/cluster.md#two-batches-in-flight).
   */
  private sendPlacement(): void {
    const mine = this.o.self.hostId;
    const elsewhere = [...this.followers.values()].some((f) => !mine || f.member.hostId !== mine);
    if (elsewhere === this.placement) return;
    this.placement = elsewhere;
    this.o.storage.placement(elsewhere);
    this.o.log.info({ followersElsewhere: elsewhere }, elsewhere ? 'a follower runs on another machine' : 'every connected follower runs on this machine');
  }

  // ---- liveness ----------------------------------------------------------------------------

  private tick(): void {
    if (this.done) return;
    const now = performance.now();
    this.lastTickAt = now;
    this.noticeSent(); // the heartbeats carry it
    for (const f of [...this.followers.values()]) {
      if (now - f.lastAckAt > ACK_TIMEOUT_MS) this.drop(f, `no ACK for ${ACK_TIMEOUT_MS} ms`);
      else f.call.write({ term: this.term, commitThrough: this.committedThrough });
    }
    for (const [id, since] of this.disconnected) {
      if (now - since > FORGET_MS) {
        this.disconnected.delete(id);
        this.publishState();
      }
    }
    const every = this.degraded ? Math.min(TOUCH_MS, this.o.ttlMs / 3) : this.o.watchIntervalMs;
    if (now - this.lastTouchAttempt >= every) void this.touch();
    this.evaluate();
  }

  /** The conditional liveness write: success proves the lock is still ours. */
  private async touch(): Promise<void> {
    if (this.touching || this.done) return;
    this.touching = true;
    const started = performance.now();
    this.lastTouchAttempt = started;
    try {
      const next = await this.o.lock.replace({ ...this.held.record, lastSeenNano: nowNano() }, this.held.etag);
      if (this.done) return;
      if (!next) {
        this.o.log.error({ term: this.term }, 'the leader lock was taken by another node: deposed, stepping down');
        return this.end('deposed');
      }
      this.held = next;
      this.lastTouchOk = started;
      this.evaluate();
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'could not touch the leader lock (object store unreachable?); writes stop if it lasts');
    } finally {
      this.touching = false;
    }
  }

  /**
   * Peer.GetRevision / a linearizable read on this node: only while the lock is surely ours.
   * `forFollower`: the reader's node applies through `index` before it answers, so the commit
   * notice leaves now.
   */
  readIndex(forFollower = false): { index: number; revision: number; term: number } {
    this.catchUpTimers();
    if (this.done || !this.serving || !this.fresh()) throw Errors.noLeader;
    if (forFollower) this.sendCommitNotice();
    return { index: this.committedThrough, revision: this.committedRevision, term: this.term };
  }
}
