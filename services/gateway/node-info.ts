// What the gateway knows about its node: ids (from the database storage created), name and
// addresses, for response headers, Status and MemberList.
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { META } from '../../shared/mvcc/schema.js';
import type { Header } from '../../shared/mvcc/responses.js';
import type { ClusterView } from './cluster-view.js';

export interface MemberInfo {
  ID: string;
  name: string;
  peerURLs: string[];
  clientURLs: string[];
  isLearner: boolean;
}

export class NodeInfo {
  readonly clusterId: string;
  readonly memberId: string;
  /** Cluster mode: the peer agent's view (term, leader, members). */
  cluster: ClusterView | undefined;
  /** Cluster mode: a follower's reads wait for the leader's committed index unless serializable. */
  linearizableReads = true;
  /** How peer URLs show (`https` with peer TLS, as etcd shows them). */
  peerScheme: 'http' | 'https' = 'http';

  constructor(db: MvccDb, readonly name: string, readonly clientUrls: string[]) {
    db.env.resetReadTxn();
    const c = db.meta.get(META.clusterId) as string | undefined;
    const m = db.meta.get(META.memberId) as string | undefined;
    if (!c || !m) throw new Error('the database has no cluster identity yet: start the storage component first');
    this.clusterId = c;
    this.memberId = m;
  }

  /** The election term in cluster mode; a single node reports 1, as a one-member etcd. */
  get raftTerm(): number {
    return this.cluster?.term || 1;
  }

  /** The leader's member id ('0' while there is none). */
  get leaderId(): string {
    if (!this.cluster) return this.memberId;
    return this.cluster.leader?.memberId ?? '0';
  }

  /** Whether a read here must first wait for the leader's committed index. */
  mustLinearize(serializable: boolean): boolean {
    const c = this.cluster;
    if (!c || serializable) return false;
    // On the leader too: a leader paused (or cut off) may have been replaced without knowing it
    // yet, and its own state is then stale. Its peer agent answers only with proof that it
    // still leads (leader.ts: readIndex), as etcd's ReadIndex confirms leadership first.
    return this.linearizableReads;
  }

  members(): MemberInfo[] {
    const self: MemberInfo = { ID: this.memberId, name: this.name, peerURLs: [], clientURLs: this.clientUrls, isLearner: false };
    if (!this.cluster) return [self];
    const list = this.cluster.members.map((m) => ({ ID: m.memberId, name: m.nodeId, peerURLs: [peerUrl(m.peerUrl, this.peerScheme)], clientURLs: m.clientUrl ? [m.clientUrl] : [], isLearner: false }));
    if (!list.some((m) => m.ID === this.memberId)) list.push({ ...self, peerURLs: [] });
    return list.sort((a, b) => a.name.localeCompare(b.name));
  }

  header(revision: number): Header {
    return { clusterId: this.clusterId, memberId: this.memberId, revision, raftTerm: this.raftTerm };
  }
}

/** A peer address as etcd shows peer URLs. */
function peerUrl(addr: string, scheme: string): string {
  return /^[a-z]+:\/\//.test(addr) ? addr : `${scheme}://${addr}`;
}
