// What the gateway knows about its node: ids (from the database storage created), name and
// addresses, for response headers, Status and MemberList.
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { META } from '../../shared/mvcc/schema.js';
import type { Header } from '../../shared/mvcc/responses.js';

export class NodeInfo {
  readonly clusterId: string;
  readonly memberId: string;
  readonly raftTerm = 1;

  constructor(db: MvccDb, readonly name: string, readonly clientUrls: string[]) {
    db.env.resetReadTxn();
    const c = db.meta.get(META.clusterId) as string | undefined;
    const m = db.meta.get(META.memberId) as string | undefined;
    if (!c || !m) throw new Error('the database has no cluster identity yet: start the storage component first');
    this.clusterId = c;
    this.memberId = m;
  }

  header(revision: number): Header {
    return { clusterId: this.clusterId, memberId: this.memberId, revision, raftTerm: this.raftTerm };
  }
}
