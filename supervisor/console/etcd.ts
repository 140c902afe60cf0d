// The console's way into the node: etcd's own gRPC API on the node's client port (and on the
// other members' client URLs), with the logged-in user's token, so that every permission check
// is the API's own (reserved key space included) and a token has the node's TTL. The calls go
// through the shared etcd client (shared/etcd-client.ts), one per member address; this file
// gives them the types and errors the console works with.
import * as grpc from '@grpc/grpc-js';
import { num } from '../../shared/proto/index.js';
import type { Config } from '../../shared/config.js';
import { EtcdClient, tokenMetadata } from '../../shared/etcd-client.js';

/** A gRPC failure as the console shows it: etcd's status and message. */
export class EtcdError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export interface KeyValue {
  key: Buffer;
  value: Buffer;
  createRevision: number;
  modRevision: number;
  version: number;
  lease: string;
}

export interface RangeResult {
  revision: number;
  kvs: KeyValue[];
  more: boolean;
  count: number;
}

export interface WatchEvent {
  type: 'PUT' | 'DELETE';
  kv: KeyValue;
}

const CALL_MS = 10_000;

function toKv(kv: any): KeyValue {
  return {
    key: Buffer.from(kv.key ?? []),
    value: Buffer.from(kv.value ?? []),
    createRevision: num(kv.createRevision),
    modRevision: num(kv.modRevision),
    version: num(kv.version),
    lease: kv.lease ? String(kv.lease) : '0',
  };
}

/** The host:port to dial for a listen address (a wildcard means this machine). */
export function dialAddress(listen: string): string {
  const m = /^(.*):(\d+)$/.exec(listen);
  if (!m) return listen;
  const host = m[1] === '0.0.0.0' || m[1] === '' || m[1] === '[::]' || m[1] === '::' ? '127.0.0.1' : m[1];
  return `${host}:${m[2]}`;
}

/** What a watch reports, and how it ends. */
export interface WatchHandlers {
  onEvents(revision: number, events: WatchEvent[]): void;
  /** The answer to requestProgress: every event through `revision` has been sent. */
  onProgress?(revision: number): void;
  /** The error that ended the watch, if any (none: cancelled or ended by the node). */
  onEnd(err?: EtcdError): void;
}

export interface WatchHandle {
  cancel(): void;
  /** Asks the node for its revision once every event up to it has been sent (onProgress). */
  requestProgress(): void;
}

const toEtcdError = (err: grpc.ServiceError): EtcdError => new EtcdError(err.code, err.details || err.message);

export class EtcdApi {
  private readonly clients = new Map<string, EtcdClient>();

  constructor(private readonly cfg: Config) {}

  /** The node's own client port. */
  get self(): string {
    return dialAddress(this.cfg.listen);
  }

  private client(addr: string): EtcdClient {
    let c = this.clients.get(addr);
    if (!c) {
      const cfg = this.cfg;
      // Our own port (or a member named by the cluster's MemberList): the certificate is the
      // node's, so it is not verified against a CA the console does not have; with mutual TLS
      // the node presents its own certificate (a token, when given, wins over its CN).
      const mutual = cfg.clientTlsCert && cfg.clientTlsCa ? { cert: cfg.clientTlsCert, key: cfg.clientTlsKey } : {};
      c = new EtcdClient({ endpoints: [`${cfg.clientTlsCert ? 'https' : 'http'}://${addr}`], insecureSkipTlsVerify: true, ...mutual });
      this.clients.set(addr, c);
    }
    return c;
  }

  private async unary<T = any>(addr: string, svc: 'KV' | 'Lease' | 'Auth' | 'Maintenance' | 'Cluster', method: string, req: object, token?: string, ms = CALL_MS): Promise<T> {
    try {
      return await this.client(addr).withToken<T>(token, svc, method, req, ms);
    } catch (err) {
      throw (err as grpc.ServiceError).code !== undefined ? toEtcdError(err as grpc.ServiceError) : err;
    }
  }

  async authenticate(name: string, password: string): Promise<string> {
    const r = await this.unary(this.self, 'Auth', 'Authenticate', { name, password });
    return r.token as string;
  }

  async userRoles(token: string | undefined, name: string): Promise<string[]> {
    const r = await this.unary(this.self, 'Auth', 'UserGet', { name }, token);
    return (r.roles ?? []) as string[];
  }

  async rolePerms(token: string | undefined, role: string): Promise<{ permType: number; key: Buffer; rangeEnd: Buffer }[]> {
    const r = await this.unary(this.self, 'Auth', 'RoleGet', { role }, token);
    return (r.perm ?? []).map((p: any) => ({ permType: p.permType ?? 0, key: Buffer.from(p.key ?? []), rangeEnd: Buffer.from(p.rangeEnd ?? []) }));
  }

  async range(
    token: string | undefined,
    req: { key: Buffer; rangeEnd?: Buffer; limit?: number; revision?: number; keysOnly?: boolean; serializable?: boolean; countOnly?: boolean },
  ): Promise<RangeResult> {
    const r = await this.unary(this.self, 'KV', 'Range', req, token);
    return { revision: num(r.header?.revision), kvs: (r.kvs ?? []).map(toKv), more: !!r.more, count: num(r.count) };
  }

  async leaseTtl(token: string | undefined, id: string): Promise<{ ttl: number; grantedTtl: number }> {
    const r = await this.unary(this.self, 'Lease', 'LeaseTimeToLive', { ID: id, keys: false }, token);
    return { ttl: num(r.TTL), grantedTtl: num(r.grantedTTL) };
  }

  async compact(token: string | undefined, revision: number): Promise<number> {
    const r = await this.unary(this.self, 'KV', 'Compact', { revision, physical: false }, token, 120_000);
    return num(r.header?.revision);
  }

  async memberList(token: string | undefined): Promise<{ memberId: string; members: { id: string; name: string; clientURLs: string[]; peerURLs: string[] }[] }> {
    const r = await this.unary(this.self, 'Cluster', 'MemberList', {}, token);
    return {
      memberId: String(r.header?.memberId ?? '0'),
      members: (r.members ?? []).map((m: any) => ({ id: String(m.ID ?? '0'), name: m.name ?? '', clientURLs: m.clientURLs ?? [], peerURLs: m.peerURLs ?? [] })),
    };
  }

  /** Maintenance.Status of the node at `addr` (host:port); the user's token goes with it. */
  async status(token: string | undefined, addr = this.self, ms = 2000): Promise<{ memberId: string; leader: string; raftTerm: number; revision: number; dbSize: number; version: string }> {
    const r = await this.unary(addr, 'Maintenance', 'Status', {}, token, ms);
    return {
      memberId: String(r.header?.memberId ?? '0'),
      leader: String(r.leader ?? '0'),
      raftTerm: num(r.raftTerm ?? r.header?.raftTerm),
      revision: num(r.header?.revision),
      dbSize: num(r.dbSize),
      version: r.version ?? '',
    };
  }

  /** A watch on [key, rangeEnd) from `startRevision` (0: now), until cancelled or ended. */
  watch(token: string | undefined, key: Buffer, rangeEnd: Buffer, startRevision: number, h: WatchHandlers): WatchHandle {
    const call = this.client(this.self).client('Watch').watch(tokenMetadata(token)) as grpc.ClientDuplexStream<any, any>;
    let ended = false;
    const end = (err?: EtcdError) => {
      if (ended) return;
      ended = true;
      h.onEnd(err);
    };
    call.on('data', (res: any) => {
      if (res.canceled) {
        end(new EtcdError(grpc.status.CANCELLED, res.cancelReason || (num(res.compactRevision) ? `required revision has been compacted (compact revision ${num(res.compactRevision)})` : 'watch canceled')));
        call.cancel();
        return;
      }
      const evs: WatchEvent[] = (res.events ?? []).map((e: any) => ({ type: e.type === 1 ? 'DELETE' : 'PUT', kv: toKv(e.kv) }));
      if (evs.length > 0) h.onEvents(num(res.header?.revision), evs);
      // Neither events nor the creation: a progress answer (etcd sends it as an empty response).
      else if (!res.created) h.onProgress?.(num(res.header?.revision));
    });
    call.on('error', (err: grpc.ServiceError) => end(err.code === grpc.status.CANCELLED ? undefined : toEtcdError(err)));
    call.on('end', () => end());
    call.write({ createRequest: { key, rangeEnd, startRevision } });
    return {
      cancel: () => {
        ended = true;
        call.cancel();
      },
      requestProgress: () => {
        if (!ended) call.write({ progressRequest: {} });
      },
    };
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}

/** host:port of a client URL (http://h:p or https://h:p). */
export function urlAddress(url: string): string {
  try {
    const u = new URL(url);
    // An IPv6 host keeps its brackets, as a gRPC target wants it.
    return `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`;
  } catch {
    return url;
  }
}
