// The Cluster view's members: every member this console has seen (the leader's MemberList
// drops one that is down), each asked for its own Maintenance.Status with the user's token;
// leader changes and members going down or up, as this console sees them, go to the timeline.
import { urlAddress, type EtcdApi } from './etcd.js';
import type { TimelineEvent } from './series.js';

export interface MemberView {
  id: string;
  name: string;
  clientURL: string;
  up: boolean;
  /** In the member list the node gave now. */
  listed: boolean;
  role?: string;
  term?: number;
  revision?: number;
  leader?: string;
  /** Revisions behind the leader. */
  lag?: number;
  error?: string;
}

export class Members {
  private readonly seen = new Map<string, { name: string; clientURL: string }>();
  /** The leader and term the last view saw. */
  private lastLeader: { name: string; term: number } | undefined;
  private readonly memberUp = new Map<string, boolean>();

  constructor(
    private readonly etcd: EtcdApi,
    private readonly event: (e: TimelineEvent) => void,
  ) {}

  async view(token: string | undefined): Promise<{ self: object; members: MemberView[]; memberListError?: string }> {
    const self = await this.etcd.status(token).catch((err: Error) => ({ error: err.message }));
    const list = await this.etcd.memberList(token).catch((err: Error) => ({ error: err.message }));
    if ('members' in list) for (const mem of list.members) this.seen.set(mem.id, { name: mem.name, clientURL: mem.clientURLs[0] ?? '' });
    const listed = new Set('members' in list ? list.members.map((x) => x.id) : []);
    const members: MemberView[] = await Promise.all(
      [...this.seen.entries()].map(async ([id, mem]) => {
        try {
          // With the user's token: kvs asks for a user on Status while auth is on (etcd 3.4 does
          // not); auth state, tokens included, is the cluster's, so the token holds on every member.
          const s = await this.etcd.status(token, urlAddress(mem.clientURL), 1500);
          return { id, name: mem.name, clientURL: mem.clientURL, up: true, listed: listed.has(id), role: s.leader === '0' ? 'no leader' : s.leader === s.memberId ? 'leader' : 'follower', term: s.raftTerm, revision: s.revision, leader: s.leader };
        } catch (err) {
          return { id, name: mem.name, clientURL: mem.clientURL, up: false, listed: listed.has(id), error: unreachable((err as Error).message) };
        }
      }),
    );
    const leader = members.find((x) => x.up && x.role === 'leader');
    const withLag = members.map((x) => ({ ...x, lag: leader?.revision !== undefined && x.revision !== undefined ? Math.max(0, leader.revision - x.revision) : undefined }));
    withLag.sort((a, b) => a.name.localeCompare(b.name));
    // Elections anywhere in the cluster, as this console sees the leader change.
    if (leader?.term !== undefined) {
      const now = { name: leader.name, term: leader.term };
      if (this.lastLeader && (this.lastLeader.name !== now.name || this.lastLeader.term !== now.term)) {
        this.event({ t: Date.now(), kind: 'election', text: `leader ${this.lastLeader.name} (term ${this.lastLeader.term}) -> ${now.name} (term ${now.term})` });
      }
      this.lastLeader = now;
    }
    for (const x of withLag) {
      const was = this.memberUp.get(x.id);
      if (was !== undefined && was !== x.up) this.event({ t: Date.now(), kind: 'member', text: `${x.name} ${x.up ? 'is up again' : 'is down'}` });
      this.memberUp.set(x.id, x.up);
    }
    return { self, members: withLag, memberListError: 'error' in list ? list.error : undefined };
  }
}

/** grpc-js's long UNAVAILABLE text, cut to what failed (e.g. "connect ECONNREFUSED 127.0.0.1:2379"). */
function unreachable(message: string): string {
  const m = /(connect E[A-Z]+ [^\s.]+(?:\.[^\s.]+)*)|(Deadline exceeded)/i.exec(message);
  return m ? `unreachable: ${m[0].replace(/\.$/, '')}` : message;
}
