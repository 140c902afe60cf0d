// The gateway in cluster mode (docs/cluster.md): it follows its peer agent's view of the node
// (Agent.State: role, term, leader, members), sends writes to storage while this node leads
// and to the peer agent for forwarding while it follows, and makes a follower's reads
// linearizable: the leader's committed index first (Agent.ReadIndex, one call shared by every
// read waiting for it), then until storage has applied it.
import { status, type MethodDefinition } from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { service, num } from '../../shared/proto/index.js';
import type { CallError, H2Stream, StreamChannel } from '../../shared/grpc/stream-channel.js';
import { Role } from '../../shared/membership.js';
import { channelBatchLink, type BatchLink, type WriteLink } from '../../shared/batch-link/link.js';
import { EtcdError, Errors } from '../../shared/errors.js';
import { AuthErrors } from '../../shared/auth/errors.js';
import { Op } from '../../shared/storage/ops.js';
import type { Logger } from '../../shared/log.js';
import type { FeedLink } from './watch/feed-link.js';

const AGENT = service('kvs.peer.Agent');

export interface MemberView {
  nodeId: string;
  memberId: string;
  peerUrl: string;
  clientUrl: string;
}

interface StateMessage {
  role: number;
  term: unknown;
  leader?: MemberView & { memberId: unknown };
  members: (MemberView & { memberId: unknown })[];
  inSync: boolean;
  reason: string;
  degraded: boolean;
}

const member = (m: MemberView & { memberId: unknown }): MemberView => ({ ...m, memberId: String(m.memberId) });

export class ClusterView {
  role: number = Role.UNKNOWN;
  term = 0;
  leader: MemberView | undefined;
  members: MemberView[] = [];
  /** Leader with a member disconnected: its own linearizable reads check the lock first. */
  degraded = false;
  private call: H2Stream<object, StateMessage> | undefined;
  private closed = false;
  /** The ReadIndex call in flight, and the one that the reads arriving meanwhile share. */
  private current: Promise<number> | undefined;
  private pending: Promise<number> | undefined;

  /**
   * `channel`: one connection to the peer agent for its State stream, ReadIndex and the Forward
   * links, on our own HTTP/2 (shared/grpc/stream-channel.ts): every linearizable read on a
   * follower crosses it twice. Its owner closes it.
   */
  constructor(private readonly channel: StreamChannel, private readonly feed: FeedLink, private readonly log: Logger) {
    this.open();
  }

  get leading(): boolean {
    return this.role === Role.LEADER;
  }

  private open(): void {
    if (this.closed) return;
    const call = this.channel.stream(AGENT.State as MethodDefinition<object, StateMessage>);
    this.call = call;
    call.write({});
    call.end();
    call.on('data', (s: StateMessage) => {
      if (s.role !== this.role) this.log.info({ role: ['none', 'leader', 'follower'][s.role], term: num(s.term as number), leader: s.leader?.nodeId }, 'cluster role');
      this.role = s.role;
      this.term = num(s.term as number);
      this.leader = s.leader ? member(s.leader) : undefined;
      this.members = s.members.map(member);
      this.degraded = s.degraded;
    });
    const broken = () => {
      if (this.call !== call) return;
      this.call = undefined;
      this.role = Role.UNKNOWN;
      if (!this.closed) setTimeout(() => this.open(), 200).unref();
    };
    call.on('error', broken);
    call.on('end', broken);
  }

  /**
   * Before a linearizable read: resolves once this node has applied everything the leader had
   * committed when the read arrived. A read that arrives while a ReadIndex call is out waits
   * for the next one (the one out may have been answered before the read arrived).
   */
  async linearize(): Promise<void> {
    if (this.feed.refused) throw this.feed.refusal();
    const index = await this.readIndex();
    await this.feed.applied(index);
  }

  private readIndex(): Promise<number> {
    if (!this.current) return this.start();
    this.pending ??= this.current.catch(() => 0).then(() => {
      this.pending = undefined;
      return this.start();
    });
    return this.pending;
  }

  private start(): Promise<number> {
    const p: Promise<number> = this.ask().finally(() => {
      if (this.current === p) this.current = undefined;
    });
    this.current = p;
    return p;
  }

  private ask(): Promise<number> {
    return this.channel.unary(AGENT.ReadIndex as MethodDefinition<object, { index: unknown }>, {}, 5000).then(
      (r) => num(r.index as number),
      (err: CallError) => {
        throw err.code === status.UNAVAILABLE || err.code === status.DEADLINE_EXCEEDED ? Errors.noLeader : new EtcdError(err.code, err.details);
      },
    );
  }

  /**
   * The agent's Forward streams (writes and lease calls while this node follows), on our own
   * HTTP/2 streams as the hop to storage: a forwarded write crosses this socket twice.
   */
  forwardLink(method: 'Forward' | 'ForwardLease', log: Logger): BatchLink {
    return channelBatchLink(this.channel, AGENT[method]!, log, { unavailable: Errors.noLeader, peerName: 'the peer agent' });
  }

  close(): void {
    this.closed = true;
    this.call?.cancel();
  }
}

/**
 * Writes go to storage while this node leads, else through the peer agent to the leader. A
 * forwarded write is answered once this node has applied its revision, so that a read here
 * after it (a Lock recipe's, a client's serializable one) sees it. An auth change (a token from
 * Authenticate, a user, a role) creates no revision: it is answered once this node has applied
 * what the leader has committed, so the token works here at once and a revocation counts here
 * at once. A write refused because this node checked its caller against older auth state than
 * the leader's waits for the same before the caller checks it again.
 */
export class RoutedLink implements WriteLink {
  constructor(
    private readonly view: ClusterView,
    private readonly local: WriteLink,
    private readonly forward: WriteLink,
    private readonly feed: FeedLink,
  ) {}

  async call(op: number, body: Uint8Array, authRevision?: number, traceParent?: string): Promise<Buffer> {
    if (this.view.leading) return this.local.call(op, body, authRevision, traceParent);
    if (this.feed.refused) throw this.feed.refusal();
    let res: Buffer;
    try {
      res = await this.forward.call(op, body, authRevision, traceParent);
    } catch (err) {
      if (err instanceof EtcdError && err.message === AuthErrors.authOldRevision.message) await this.view.linearize().catch(() => undefined);
      throw err;
    }
    if (op >= Op.AUTH_ENABLE && op <= Op.AUTH_ROLE_REVOKE_PERMISSION) {
      await this.view.linearize();
      return res;
    }
    const revision = headerRevision(res);
    if (revision > 0) await this.feed.applied(0, revision);
    return res;
  }
}

/** The revision in an etcd response's header (field 1, ResponseHeader.revision = field 3). */
export function headerRevision(res: Uint8Array): number {
  try {
    const r = protobuf.Reader.create(res);
    while (r.pos < r.len) {
      const tag = r.uint32();
      if (tag >>> 3 !== 1 || (tag & 7) !== 2) {
        r.skipType(tag & 7);
        continue;
      }
      const h = protobuf.Reader.create(r.bytes());
      while (h.pos < h.len) {
        const t = h.uint32();
        if (t >>> 3 === 3 && (t & 7) === 0) return Number(h.int64().toString());
        h.skipType(t & 7);
      }
      return 0;
    }
  } catch {}
  return 0;
}
