// The peer agent's end of storage's Agent.Attach stream (services/storage/peer-attach.ts): the one
// channel through which this node's storage learns its role, receives replicated entries, and
// hands up the batches a leader must replicate.
import type { ServerCall } from '../../shared/grpc/server.js';
import { EventEmitter } from 'node:events';
import type { Logger } from '../../shared/log.js';

import { Role, type RoleValue } from '../../shared/membership.js';
export { Role, type RoleValue };

type U64 = number | { toNumber(): number };
export const n = (v: U64 | undefined | null): number => (v == null ? 0 : typeof v === 'number' ? v : v.toNumber());

export interface Progress {
  durableThrough: number;
  appliedThrough: number;
  revision: number;
}

export interface Replicate {
  first: number;
  last: number;
  frames: Buffer;
  revision: number;
  seed: boolean;
}

interface StorageMessage {
  hello?: { appliedIndex: U64; lastIndex: U64; revision: U64 };
  replicate?: { first: U64; last: U64; frames: Buffer; revision: U64; seed: boolean };
  uploaded?: { through: U64 };
  progress?: { durableThrough: U64; appliedThrough: U64; revision: U64 };
  durable?: { through: U64; error: string };
  confirm?: { id: U64 };
}

/**
 * Events: `attached` (storage (re)connected; its progress is `progress`), `detached`,
 * `replicate` (Replicate), `durable` (through, error: the leader's own fsync of a batch),
 * `confirm` (id: is this node still the leader?),
 * `uploaded` (through), `progress` (Progress).
 */
export class StorageSide extends EventEmitter {
  private call: ServerCall<StorageMessage, unknown> | undefined;
  /** What storage last reported (after hello, after every append and role change). */
  progress: Progress = { durableThrough: 0, appliedThrough: 0, revision: 0 };
  private role: { role: RoleValue; term: number; degraded: boolean; termStart: number; dropStaged?: boolean } = { role: Role.UNKNOWN, term: 0, degraded: false, termStart: 0 };
  /** Calls waiting for storage's next progress; a storage that detaches first fails them. */
  private progressWaiters: { resolve(p: Progress): void; reject(err: Error): void }[] = [];

  constructor(private readonly log: Logger) {
    super();
    this.setMaxListeners(0);
  }

  get attached(): boolean {
    return this.call !== undefined;
  }

  serve(call: ServerCall<StorageMessage, unknown>): void {
    if (this.call) {
      this.log.warn('a second storage attached; dropping the first');
      this.call.end();
    }
    let hello = false;
    call.on('data', (m: StorageMessage) => {
      if (m.hello && !hello) {
        hello = true;
        this.call = call;
        this.progress = { durableThrough: n(m.hello.lastIndex), appliedThrough: n(m.hello.appliedIndex), revision: n(m.hello.revision) };
        this.log.info({ ...this.progress }, 'storage attached');
        // A storage that restarted starts without a role: it gets the current one.
        if (this.role.role !== Role.UNKNOWN) this.send({ role: this.role });
        this.emit('attached', this.progress);
        return;
      }
      if (m.progress) {
        this.progress = { durableThrough: n(m.progress.durableThrough), appliedThrough: n(m.progress.appliedThrough), revision: n(m.progress.revision) };
        for (const w of this.progressWaiters.splice(0)) w.resolve(this.progress);
        this.emit('progress', this.progress);
      } else if (m.replicate) {
        const r = m.replicate;
        this.emit('replicate', { first: n(r.first), last: n(r.last), frames: r.frames, revision: n(r.revision), seed: r.seed } satisfies Replicate);
      } else if (m.uploaded) this.emit('uploaded', n(m.uploaded.through));
      else if (m.durable) this.emit('durable', n(m.durable.through), m.durable.error);
      else if (m.confirm) this.emit('confirm', n(m.confirm.id));
    });
    const gone = () => {
      if (this.call !== call) return;
      this.call = undefined;
      this.log.warn('storage detached');
      // What this storage was asked will never be answered: a restarted one attaches afresh
      // (without a role when it had none to resume), so a caller waiting here would wait forever.
      const err = new Error('storage detached');
      for (const w of this.progressWaiters.splice(0)) w.reject(err);
      this.emit('detached');
    };
    call.on('end', () => {
      call.end();
      gone();
    });
    call.on('error', gone);
    call.on('cancelled', gone);
  }

  private send(m: object): boolean {
    if (!this.call) return false;
    this.call.write(m);
    return true;
  }

  /** Waits until storage is attached. */
  whenAttached(signal?: AbortSignal): Promise<Progress> {
    if (this.call) return Promise.resolve(this.progress);
    return new Promise((resolve, reject) => {
      const done = () => {
        signal?.removeEventListener('abort', abort);
        resolve(this.progress);
      };
      const abort = () => {
        this.off('attached', done);
        reject(new Error('aborted'));
      };
      this.once('attached', done);
      signal?.addEventListener('abort', abort, { once: true });
    });
  }

  /** Sends `m`; resolves with storage's next progress (its answer), rejects if it is not attached. */
  private ask(m: object): Promise<Progress> {
    if (!this.send(m)) return Promise.reject(new Error('storage is not attached'));
    return new Promise<Progress>((resolve, reject) => this.progressWaiters.push({ resolve, reject }));
  }

  /** Sets storage's role; resolves with its progress after it took the role. */
  setRole(role: RoleValue, term: number, degraded = false, termStart = 0): Promise<Progress> {
    this.role = { role, term, degraded, termStart };
    return this.ask({ role: this.role });
  }

  /** Follower: storage drops its staged entries (a leader answered and sends them again). */
  dropStaged(term: number): Promise<Progress> {
    return this.ask({ role: { ...this.role, role: Role.FOLLOWER, term, dropStaged: true } });
  }

  /** The role storage has been told (sent again when it re-attaches). */
  get currentRole(): RoleValue {
    return this.role.role;
  }

  /** Follower: entries to append and the commit position; storage answers with progress. */
  entries(first: number, last: number, frames: Buffer | undefined, commitThrough: number, committed = false): boolean {
    return this.send({ entries: { first, last, frames, commitThrough, committed } });
  }

  /** Follower: entries from the object store (committed); resolves once storage applied them. */
  committedEntries(first: number, last: number, frames: Buffer): Promise<Progress> {
    return this.ask({ entries: { first, last, frames, commitThrough: last, committed: true } });
  }

  /** Leader: the answer to a Confirm (no error: still leading). */
  confirmed(id: number, err?: { code: number; message: string }): void {
    this.send({ confirmed: { id, code: err?.code ?? 0, message: err?.message ?? '' } });
  }

  /** Leader: whether a connected follower runs on another machine (AgentMessage.Placement). */
  placement(followersElsewhere: boolean): void {
    this.send({ placement: { followersElsewhere } });
  }

  /** Leader: the answer to a Replicate. */
  replicated(through: number, answer: { uploadFirst?: boolean; code?: number; message?: string } = {}): void {
    this.send({ replicated: { through, uploadFirst: answer.uploadFirst ?? false, code: answer.code ?? 0, message: answer.message ?? '' } });
  }
}
