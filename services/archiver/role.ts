// The archiver in cluster mode: only the leader takes checkpoints (a follower's database is
// the same history, behind), and they carry its term. The role comes from this node's peer
// agent (Agent.State), followed for as long as the archiver runs.
import * as grpc from '@grpc/grpc-js';
import { service, num } from '../../shared/proto/index.js';
import { INTERNAL_CHANNEL_OPTIONS } from '../../shared/grpc/plumbing.js';
import { Role } from '../../shared/membership.js';

const AgentClient = grpc.makeGenericClientConstructor(service('kvs.peer.Agent'), 'Agent');

export class LeaderRole {
  leading = false;
  term = 1;
  private readonly client: grpc.Client & Record<string, any>;
  private call: grpc.ClientReadableStream<{ role: number; term: unknown }> | undefined;
  private closed = false;

  constructor(socket: string) {
    this.client = new AgentClient(`unix:${socket}`, grpc.credentials.createInsecure(), INTERNAL_CHANNEL_OPTIONS) as any;
    this.open();
  }

  private open(): void {
    if (this.closed) return;
    const call = this.client.State({}) as grpc.ClientReadableStream<{ role: number; term: unknown }>;
    this.call = call;
    call.on('data', (s: { role: number; term: unknown }) => {
      this.leading = s.role === Role.LEADER;
      if (num(s.term as number) > 0) this.term = num(s.term as number);
    });
    const broken = () => {
      if (this.call !== call) return;
      this.leading = false;
      if (!this.closed) setTimeout(() => this.open(), 500).unref();
    };
    call.on('error', broken);
    call.on('end', broken);
  }

  close(): void {
    this.closed = true;
    this.call?.cancel();
    this.client.close();
  }
}
