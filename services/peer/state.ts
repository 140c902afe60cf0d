// The node's cluster state as the gateway and the archiver see it (Agent.State): role, term,
// leader, members, and whether a follower has caught up. Subscribers get it at once and on
// every change; the role metric follows it.
import type { ServerCall } from '../../shared/grpc/server.js';
import * as M from '../../shared/metrics.js';
import { reportHealth } from '../../shared/component.js';
import { Role, type RoleValue } from './storage-side.js';

export interface Member {
  nodeId: string;
  memberId: string;
  peerUrl: string;
  clientUrl: string;
  /** The machine's boot id (hostId() in main.ts): members with the same one share its CPUs. */
  hostId?: string;
}

export interface ClusterState {
  role: RoleValue;
  term: number;
  leader: Member | undefined;
  /** The leader's lock epoch (lock.ts), carried by this node's calls to it. */
  leaderEpoch: string;
  members: Member[];
  inSync: boolean;
  reason: string;
  degraded: boolean;
  /** Why the leader's replication is degraded ('' when it is not; a follower's as its leader said). */
  leaderDegraded: string;
}

const ROLE_NAMES = { [Role.LEADER]: 'leader', [Role.FOLLOWER]: 'follower' } as Record<number, string>;

export class StateBoard {
  private state: ClusterState = { role: Role.UNKNOWN, term: 0, leader: undefined, leaderEpoch: '', members: [], inSync: false, reason: 'electing a leader', degraded: false, leaderDegraded: '' };
  private readonly subscribers = new Set<ServerCall<unknown, unknown>>();
  private waiters: (() => void)[] = [];
  private readonly listeners: (() => void)[] = [];

  constructor() {
    M.role.set({ role: 'leader' }, 0);
    M.role.set({ role: 'follower' }, 0);
    M.role.set({ role: 'single' }, 0);
  }

  get current(): ClusterState {
    return this.state;
  }

  update(change: Partial<ClusterState>): void {
    this.state = { ...this.state, ...change };
    for (const r of ['leader', 'follower']) M.role.set({ role: r }, ROLE_NAMES[this.state.role] === r ? 1 : 0);
    const msg = this.message();
    for (const s of this.subscribers) s.write(msg);
    // /readyz: a follower is ready once it has caught up with its leader.
    reportHealth({ writesRefused: this.state.inSync ? '' : this.state.reason });
    if (this.hasLeader) for (const w of this.waiters.splice(0)) w();
    for (const l of this.listeners) l();
  }

  /** Calls `listener` after every change. */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** This node leads, or follows a known leader. */
  get hasLeader(): boolean {
    return this.state.role === Role.LEADER || (this.state.role === Role.FOLLOWER && this.state.leader !== undefined);
  }

  /**
   * Resolves once there is a leader, or after `ms` (a request that arrives during a short
   * election waits for it, as etcd's do, instead of failing at once).
   */
  whenLeader(ms: number): Promise<void> {
    if (this.hasLeader) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.push(done);
    });
  }

  subscribe(call: ServerCall<unknown, unknown>): void {
    this.subscribers.add(call);
    call.write(this.message());
    const done = () => this.subscribers.delete(call);
    call.on('cancelled', done);
    call.on('close', done);
    call.on('error', done);
  }

  private message() {
    const s = this.state;
    return { role: s.role, term: s.term, leader: s.leader, members: s.members, inSync: s.inSync, reason: s.reason, degraded: s.degraded, leaderDegraded: s.leaderDegraded };
  }
}
