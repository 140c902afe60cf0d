// A follower's term: connects to the leader named by the lock, hands what it streams to this
// node's storage (which fsyncs, then ACKs through here, and applies what is committed), and
// decides when the leader is gone (docs/cluster.md):
//  - from its first failure to reach the leader the follower watches the lock; once
//    --follower-max-retries consecutive attempts failed, and only when it has itself seen the
//    lock unchanged (same ETag) for the liveness TTL on its own monotonic clock — and the lock's
//    LastSeenNano is that old too — does it try to take it (a conditional replace: one
//    candidate wins);
//  - a follower that has not heard from this leader lately while in sync with it (a new node,
//    one still catching up, or one cut off for longer than FAST_TAKEOVER_WINDOW_MS) waits longer: the leader re-touches its lock only every
//    --leader-watch-interval-sec while its known followers are connected, so such a node must
//    see the lock unchanged for that interval plus the TTL.
import type { Logger } from '../../shared/log.js';
import * as M from '../../shared/metrics.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import { TooFarBehindError, catchUpFromStore } from './catch-up.js';
import { newEpoch, nowNano, type HeldLock, type LeaderLock } from './lock.js';
import { n, Role, type StorageSide } from './storage-side.js';
import type { Member, StateBoard } from './state.js';
import { PeerChannel, type PeerCredentials } from './transport.js';
import type { CallError } from '../../shared/grpc/stream-channel.js';
import { Stage, microsFromPerformance, stages } from '../../shared/stages.js';
import { DelayedCommits } from './commit-delay.js';

export interface FollowerOptions {
  self: Member;
  lock: LeaderLock;
  held: HeldLock;
  store: ObjectStore;
  storage: StorageSide;
  board: StateBoard;
  creds: PeerCredentials;
  log: Logger;
  maxRetries: number;
  retryMs: number;
  ttlMs: number;
  watchIntervalMs: number;
  /** Shared by every Following of one term (see LeaderContact). */
  contact: LeaderContact;
  signal: AbortSignal;
  /** Test failpoint (commit-delay.ts): commit positions reach storage this many ms late. */
  commitDelayMs?: number;
  /** This node is too far behind the object store to catch up: its host restores the latest checkpoint. */
  tooFarBehind(why: string): void;
}

/**
 * When this node last heard from the leader of `term` while in sync with it (monotonic ms).
 * Kept across Following instances of the same term: a degraded leader touches its lock, so a
 * follower whose stream breaks finds a new ETag and follows the same leader again; forgetting
 * the contact then would make it wait watch-interval + TTL instead of the TTL.
 */
export interface LeaderContact {
  term: number;
  at: number;
}

/** A follower that heard from its leader within this window may take over after the TTL alone. */
const FAST_TAKEOVER_WINDOW_MS = 20_000;
/** No message from the leader for this long breaks the stream (it heartbeats every 500 ms). */
const SILENCE_MS = 3000;
/** How often the lock is read between attempts to reach an unreachable leader. */
const LOCK_POLL_MS = 250;
/** At most one "cannot read the leader lock" line this often. */
const LOCK_ERROR_LOG_MS = 5000;
/** Attempts to reach a leader that has not served this node yet, before the spec's retries. */
const QUICK_RETRIES = 10;
const QUICK_RETRY_MS = 200;
/** A follower with nothing new durable still ACKs this often (the leader drops one silent for 3 s). */
const ALIVE_ACK_MS = 250;

/** How a follower's term ends: the lock says something new (elect again), or we took it. */
export type FollowEnd = { kind: 'elect' } | { kind: 'won'; held: HeldLock } | { kind: 'stopped' };

interface LeaderMessage {
  term: unknown;
  first: unknown;
  last: unknown;
  frames: Buffer;
  commitThrough: unknown;
  members: Member[];
  membersChanged: boolean;
  resync: string;
  leaving: boolean;
  degraded: string;
}

export class Following {
  private observed: { etag: string; since: number; fast: boolean; skewLogged?: boolean } | undefined;
  private lockErrorLoggedAt = -Infinity;

  constructor(private readonly o: FollowerOptions) {}

  get leader(): Member {
    const r = this.o.held.record;
    return { nodeId: r.nodeId, memberId: r.memberId, peerUrl: r.peerUrl, clientUrl: r.clientUrl };
  }

  async run(): Promise<FollowEnd> {
    const { log, signal } = this.o;
    const client = new PeerChannel(this.o.held.record.peerUrl, this.o.creds, this.o.held.record.epoch ?? '');
    let failures = 0;
    let served = false;
    let quick = 0;
    try {
      while (!signal.aborted) {
        const outcome = await this.followOnce(client);
        if (outcome === 'leaving') return { kind: 'elect' };
        if (outcome === 'resync') {
          failures = 0;
          continue;
        }
        if (outcome === 'stopped') return { kind: 'stopped' };
        if (outcome === 'served') served = true;
        // A leader that has just taken over serves a moment after it wrote the lock (it catches
        // up from the store and records its term first): until it has served this node once,
        // the first attempts come quickly and are not the spec's retries. (A follower that lost
        // the takeover race otherwise waited a whole retry interval, 2 s, before following.)
        if (!served && quick < QUICK_RETRIES) {
          quick++;
          const end = await this.checkLock(false);
          if (end) return end;
          await sleep(Math.min(QUICK_RETRY_MS, this.o.retryMs), signal);
          continue;
        }
        failures = outcome === 'served' ? 1 : failures + 1;
        // The lock is watched from the first failure, so that the TTL of observation runs
        // alongside the retries; taking it needs both.
        const end = await this.checkLock(failures >= this.o.maxRetries);
        if (end) return end;
        // Until the next attempt the lock is read every LOCK_POLL_MS: a follower that lost the
        // takeover race learns of the new leader at once, not up to a retry interval later.
        const next = performance.now() + this.o.retryMs;
        for (let left = this.o.retryMs; left > 0 && !signal.aborted; left = next - performance.now()) {
          await sleep(Math.min(LOCK_POLL_MS, left), signal);
          const moved = await this.checkLock(false);
          if (moved) return moved;
        }
      }
      return { kind: 'stopped' };
    } catch (err) {
      if (signal.aborted) return { kind: 'stopped' };
      log.error({ err: (err as Error).message }, 'following failed; electing again');
      return { kind: 'elect' };
    } finally {
      client.close();
    }
  }

  /** One stream to the leader: until it breaks. */
  private async followOnce(client: PeerChannel): Promise<'failed' | 'served' | 'resync' | 'leaving' | 'stopped'> {
    const { storage, board, log, held, signal } = this.o;
    const term = held.record.term;
    await storage.whenAttached(signal).catch(() => undefined);
    if (signal.aborted) return 'stopped';
    // Staged entries stay until a leader answers (see the first message below).
    const p = await storage.setRole(Role.FOLLOWER, term);
    board.update({ role: Role.FOLLOWER, term, leader: this.leader, leaderEpoch: held.record.epoch ?? '', inSync: false, reason: `following ${held.record.nodeId}`, degraded: false, leaderDegraded: '' });
    return new Promise((resolve) => {
      const call = client.follow<unknown, LeaderMessage>();
      let served = false;
      let syncTarget = -1;
      let settled = false;
      // Test failpoint only (commit-delay.ts): otherwise each commit position goes to storage as it comes.
      const delayed = this.o.commitDelayMs
        ? new DelayedCommits(this.o.commitDelayMs, (c) => {
            if (!settled) storage.entries(0, 0, undefined, c);
          })
        : undefined;
      const finish = (how: 'failed' | 'served' | 'resync' | 'leaving' | 'stopped') => {
        if (settled) return;
        settled = true;
        delayed?.cancel();
        clearInterval(silence);
        storage.off('progress', onProgress);
        signal.removeEventListener('abort', onAbort);
        call.cancel();
        resolve(how === 'failed' && served ? 'served' : how);
      };
      let heard = performance.now();
      const silence = setInterval(() => {
        if (performance.now() - heard > SILENCE_MS) {
          log.warn({ leader: held.record.nodeId }, `no message from the leader for ${SILENCE_MS} ms`);
          finish('failed');
        }
      }, 500);
      const onAbort = () => finish('stopped');
      signal.addEventListener('abort', onAbort);
      // No ACK before storage dropped what it staged from an earlier leader (first message):
      // its durable position would count entries this leader never sent.
      let acking = false;
      let dropping = false;
      // An ACK when more is durable (what the leader waits for); after an apply alone (a commit
      // message, a heartbeat) only now and then, as a sign of life: an ACK per commit message
      // would double the messages of every write, on a machine where CPU is the limit.
      let ackedThrough = -1;
      let ackedAt = 0;
      const onProgress = (pr: { durableThrough: number; appliedThrough: number }) => {
        if (!acking) return;
        const now = performance.now();
        if (pr.durableThrough > ackedThrough || now - ackedAt >= ALIVE_ACK_MS) {
          const more = pr.durableThrough > ackedThrough;
          ackedThrough = pr.durableThrough;
          ackedAt = now;
          call.write({ ack: { durableThrough: pr.durableThrough, appliedThrough: pr.appliedThrough } });
          if (more) stages?.stamp(Stage.PEER_FOLLOWER_ACK_SENT, pr.durableThrough);
        }
        if (syncTarget >= 0 && pr.appliedThrough >= syncTarget) {
          syncTarget = -1;
          board.update({ inSync: true, reason: '' });
        }
      };
      storage.on('progress', onProgress);
      call.write({ hello: { member: this.o.self, fromIndex: p.appliedThrough + 1, term } });
      call.on('data', (m: LeaderMessage) => {
        heard = performance.now();
        // Only an in-sync follower holds everything the leader acknowledged: only it may take
        // over after the TTL alone; one still catching up waits like a newcomer.
        if (board.current.inSync) this.o.contact.at = heard;
        this.observed = undefined;
        if (!served) {
          served = true;
          this.o.creds.served(held.record);
          log.info({ leader: held.record.nodeId, term, from: p.appliedThrough + 1 }, 'following the leader');
        }
        if (m.resync) {
          M.followerResyncsTotal.inc({ reason: m.resync });
          log.info({ reason: m.resync }, 'catching up from the object store');
          call.cancel();
          catchUpFromStore(this.o.store, storage, log).then(
            () => finish('resync'),
            (err: Error) => {
              log.error({ err: err.message }, 'catching up from the object store failed');
              // The supervisor restores the latest checkpoint (storage restarts; this agent waits for it).
              if (err instanceof TooFarBehindError) this.o.tooFarBehind(err.message);
              finish('failed');
            },
          );
          return;
        }
        if (m.leaving) return finish('leaving');
        if (!dropping) {
          // This leader answers: what was staged past `applied` goes (it sends it again). Kept
          // until now: had the leader been gone, this node might have led with those entries.
          // ACKs start with storage's answer, not before: until the drop is done its durable
          // position still counts the staged entries, and an ACK of it would let the leader
          // acknowledge a batch at those indices that this node does not hold.
          dropping = true;
          storage.dropStaged(term).then(
            () => {
              if (settled) return;
              acking = true;
              // The latest progress, not the answer's: progress that came in the same read
              // (an append of this leader's entries) went by while ACKs were off.
              onProgress(storage.progress);
            },
            () => finish('failed'),
          );
        }
        if (m.membersChanged) board.update({ members: m.members, leaderDegraded: m.degraded ?? '' });
        const commit = n(m.commitThrough as number);
        if (syncTarget < 0 && !board.current.inSync) {
          syncTarget = commit;
          if (storage.progress.appliedThrough >= commit) onProgress(storage.progress);
        }
        const frames = m.frames?.length ? m.frames : undefined;
        if (frames) stages?.stamp(Stage.PEER_FOLLOWER_RECEIVE, n(m.last as number), microsFromPerformance(heard));
        if (!storage.entries(n(m.first as number), n(m.last as number), frames, delayed ? delayed.hold(commit) : commit)) finish('failed');
      });
      call.on('error', (err: CallError) => {
        if (served) log.warn({ err: err.message }, 'lost the leader');
        else {
          log.debug({ err: err.message, leader: held.record.peerUrl }, 'cannot reach the leader');
          this.o.creds.callFailed(err, held.record); // a refusal by the leader: one line saying why
        }
        finish('failed');
      });
      call.on('end', () => finish('failed'));
    });
  }

  /** Has the lock moved on, or (once retries ran out) stood still long enough to take it? */
  private async checkLock(mayTakeOver: boolean): Promise<FollowEnd | undefined> {
    const { lock, held, log, self } = this.o;
    const cur = await lock.read().catch((err: Error) => {
      // Read every LOCK_POLL_MS while the leader is unreachable: one line per outage interval.
      const now = performance.now();
      if (now - this.lockErrorLoggedAt >= LOCK_ERROR_LOG_MS) {
        this.lockErrorLoggedAt = now;
        log.warn({ err: err.message }, 'cannot read the leader lock');
      }
      return null;
    });
    if (cur === null) return undefined;
    if (!cur || cur.etag !== held.etag || cur.record.released) return { kind: 'elect' };
    const now = performance.now();
    if (!this.observed || this.observed.etag !== cur.etag) {
      this.observed = { etag: cur.etag, since: now, fast: now - this.o.contact.at < FAST_TAKEOVER_WINDOW_MS };
      log.warn({ leader: cur.record.nodeId, fast: this.observed.fast }, 'the leader is unreachable; watching its lock');
      return undefined;
    }
    if (!mayTakeOver) return undefined;
    const need = this.observed.fast ? this.o.ttlMs : this.o.watchIntervalMs + this.o.ttlMs;
    // The spec's LastSeenNano rule, but never a comparison of clocks that disagree: a stamp in
    // this node's future says its wall clock is behind the leader's, and waiting for the stamp
    // to age would wait out the skew (an hour behind: no takeover for an hour). The lock stood
    // still for `need` on this node's monotonic clock; that decides.
    const lastSeenAgeMs = Number(BigInt(nowNano()) - BigInt(cur.record.lastSeenNano)) / 1e6;
    if (now - this.observed.since < need) return undefined;
    if (lastSeenAgeMs < 0) {
      if (!this.observed.skewLogged) log.warn({ leader: cur.record.nodeId, aheadMs: Math.round(-lastSeenAgeMs) }, 'the leader lock\'s LastSeenNano is in this node\'s future: the wall clocks disagree; going by this node\'s own observation of the lock');
      this.observed.skewLogged = true;
    } else if (lastSeenAgeMs < this.o.ttlMs) return undefined;
    const won = await lock.replace({ ...self, term: cur.record.term + 1, lastSeenNano: nowNano(), epoch: newEpoch() }, cur.etag);
    M.electionsTotal.inc({ outcome: won ? 'won' : 'lost' });
    if (!won) return { kind: 'elect' };
    log.warn({ previous: cur.record.nodeId, term: won.record.term, waitedMs: Math.round(now - this.observed.since) }, 'took over the leader lock');
    return { kind: 'won', held: won };
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
