// The join of `npm run breakdown` (bench/breakdown.ts): the client's own send/receive times of
// each measured put, and the stage files kvs's processes wrote (shared/stages.ts), into one
// row of stage times per put, then the per-stage statistics.
//
// Keys: the gateway and the client know a put's revision, storage and the peer agents its WAL
// index (each serial put is one batch of one entry); the leader's storage links the two. Of the
// followers, each put shows the one whose ACK reached the leader first (the one that let the
// write proceed when the other was slower), with the first and the last ACK as two stages.
import { Stage, type StageFile, type StageId } from '../shared/stages.js';
import { percentile } from './stats.js';

/** One measured put, as the client saw it (monotonic µs, shared/stages.ts). */
export interface ClientPut {
  send: number;
  receive: number;
  revision: number;
}

type Chain = 'client' | 'gateway' | 'storage' | 'peer' | 'follower peer' | 'follower storage';

/** Where a stage's time comes from. */
type Source =
  | { kind: 'client'; which: 'send' | 'receive' }
  | { kind: 'stage'; on: 'leader' | 'follower'; process: 'gateway' | 'storage' | 'peer'; stage: StageId; key: 'revision' | 'index' }
  | { kind: 'ack'; which: 'first' | 'last' };

interface StageDef {
  name: string;
  /** The stage this one is measured from ("since"). */
  prev?: string;
  /** Stamps of one process, which must be in the order of the list. */
  chain: Chain;
  source: Source;
  /** Only in a cluster. */
  cluster?: true;
  /** Only on a single node. */
  single?: true;
}

const leader = (process: 'gateway' | 'storage' | 'peer', stage: StageId, key: 'revision' | 'index' = 'index') => ({ kind: 'stage', on: 'leader', process, stage, key }) as const;
const follower = (process: 'storage' | 'peer', stage: StageId) => ({ kind: 'stage', on: 'follower', process, stage, key: 'index' }) as const;

// In the order of a put's path; on a cluster's leader the local WAL write and fsync overlap the
// followers' work (the batch leaves for them first), so their "since" is the hand-off to the peer.
const STAGES: StageDef[] = [
  { name: 'client: request sent', chain: 'client', source: { kind: 'client', which: 'send' } },
  { name: 'gateway: Put handler called', prev: 'client: request sent', chain: 'gateway', source: leader('gateway', Stage.GATEWAY_RECEIVE, 'revision') },
  { name: 'storage: request received', prev: 'gateway: Put handler called', chain: 'storage', source: leader('storage', Stage.STORAGE_RECEIVE) },
  { name: 'storage: batch executed', prev: 'storage: request received', chain: 'storage', source: leader('storage', Stage.STORAGE_EXECUTED) },
  { name: 'storage: batch handed to peer stream', prev: 'storage: batch executed', chain: 'storage', source: leader('storage', Stage.STORAGE_TO_PEER), cluster: true },
  { name: 'storage: WAL write() returned', prev: 'storage: batch executed', chain: 'storage', source: leader('storage', Stage.STORAGE_WAL_WRITTEN), single: true },
  { name: 'storage: WAL write() returned', prev: 'storage: batch handed to peer stream', chain: 'storage', source: leader('storage', Stage.STORAGE_WAL_WRITTEN), cluster: true },
  { name: 'storage: fdatasync returned', prev: 'storage: WAL write() returned', chain: 'storage', source: leader('storage', Stage.STORAGE_FSYNCED) },
  { name: 'peer (leader): batch received', prev: 'storage: batch handed to peer stream', chain: 'peer', source: leader('peer', Stage.PEER_LEADER_RECEIVE), cluster: true },
  { name: 'peer (leader): batch sent to followers', prev: 'peer (leader): batch received', chain: 'peer', source: leader('peer', Stage.PEER_LEADER_SENT), cluster: true },
  { name: 'follower peer: batch received', prev: 'peer (leader): batch sent to followers', chain: 'follower peer', source: follower('peer', Stage.PEER_FOLLOWER_RECEIVE), cluster: true },
  { name: 'follower storage: entries received', prev: 'follower peer: batch received', chain: 'follower storage', source: follower('storage', Stage.FOLLOWER_STORAGE_RECEIVE), cluster: true },
  { name: 'follower storage: WAL write() returned', prev: 'follower storage: entries received', chain: 'follower storage', source: follower('storage', Stage.FOLLOWER_WAL_WRITTEN), cluster: true },
  { name: 'follower storage: fdatasync returned', prev: 'follower storage: WAL write() returned', chain: 'follower storage', source: follower('storage', Stage.FOLLOWER_FSYNCED), cluster: true },
  { name: 'follower storage: progress sent to peer', prev: 'follower storage: fdatasync returned', chain: 'follower storage', source: follower('storage', Stage.FOLLOWER_PROGRESS_SENT), cluster: true },
  { name: 'follower peer: ACK sent', prev: 'follower storage: progress sent to peer', chain: 'follower peer', source: follower('peer', Stage.PEER_FOLLOWER_ACK_SENT), cluster: true },
  { name: 'peer (leader): first ACK received', prev: 'follower peer: ACK sent', chain: 'peer', source: { kind: 'ack', which: 'first' }, cluster: true },
  { name: 'peer (leader): last ACK received', prev: 'peer (leader): first ACK received', chain: 'peer', source: { kind: 'ack', which: 'last' }, cluster: true },
  { name: 'peer (leader): replicated sent to storage', prev: 'peer (leader): last ACK received', chain: 'peer', source: leader('peer', Stage.PEER_LEADER_REPLICATED), cluster: true },
  { name: 'storage: replicated received', prev: 'peer (leader): replicated sent to storage', chain: 'storage', source: leader('storage', Stage.STORAGE_REPLICATED), cluster: true },
  { name: 'storage: LMDB committed', prev: 'storage: fdatasync returned', chain: 'storage', source: leader('storage', Stage.STORAGE_COMMITTED), single: true },
  { name: 'storage: LMDB committed', prev: 'storage: replicated received', chain: 'storage', source: leader('storage', Stage.STORAGE_COMMITTED), cluster: true },
  { name: 'storage: answer handed back', prev: 'storage: LMDB committed', chain: 'storage', source: leader('storage', Stage.STORAGE_ANSWERED) },
  { name: 'storage: answer written to gateway stream', prev: 'storage: answer handed back', chain: 'storage', source: leader('storage', Stage.STORAGE_ANSWER_SENT) },
  { name: 'gateway: answer from storage', prev: 'storage: answer written to gateway stream', chain: 'gateway', source: leader('gateway', Stage.GATEWAY_ANSWER_RECEIVED, 'revision') },
  { name: 'gateway: answer written to client stream', prev: 'gateway: answer from storage', chain: 'gateway', source: leader('gateway', Stage.GATEWAY_ANSWER_SENT, 'revision') },
  { name: 'client: answer received', prev: 'gateway: answer written to client stream', chain: 'client', source: { kind: 'client', which: 'receive' } },
];

/** The stages measured in one mode, in path order. */
export function stageDefs(cluster: boolean): StageDef[] {
  return STAGES.filter((s) => (cluster ? !s.single : !s.cluster));
}

/**
 * First stamp per (stage, key) of one process's files (more than one if it restarted during the
 * run), by this build's stage ids.
 */
class Stamps {
  private readonly byStage = new Map<number, Map<number, number>>();
  /** PEER_LEADER_ACK per follower: keys ascending, and the earliest time at or after each. */
  readonly acks = new Map<string, { keys: Float64Array; earliest: Float64Array }>();
  readonly links = new Map<number, number>();

  constructor(files: StageFile[]) {
    const acks = new Map<string, [number, number][]>();
    for (const file of files) this.add(file, acks);
    for (const [who, list] of acks) {
      list.sort((a, b) => a[0] - b[0]);
      const keys = Float64Array.from(list, (a) => a[0]);
      const earliest = Float64Array.from(list, (a) => a[1]);
      for (let i = earliest.length - 2; i >= 0; i--) earliest[i] = Math.min(earliest[i]!, earliest[i + 1]!);
      this.acks.set(who, { keys, earliest });
    }
  }

  private add(file: StageFile, acks: Map<string, [number, number][]>): void {
    const ids = file.stages.map((name) => (Stage as Record<string, number>)[name]);
    for (let i = 0; i < file.stage.length; i++) {
      const id = ids[file.stage[i]!];
      if (id === undefined) continue;
      const key = file.key[i]!;
      if (id === Stage.LINK) {
        if (!this.links.has(key)) this.links.set(key, file.aux[i]!);
        continue;
      }
      if (id === Stage.PEER_LEADER_ACK) {
        const who = file.labels[file.aux[i]!] ?? String(file.aux[i]);
        let list = acks.get(who);
        if (!list) acks.set(who, (list = []));
        list.push([key, file.time[i]!]);
        continue;
      }
      let m = this.byStage.get(id);
      if (!m) this.byStage.set(id, (m = new Map()));
      if (!m.has(key)) m.set(key, file.time[i]!);
    }
  }

  get(stage: number, key: number): number | undefined {
    return this.byStage.get(stage)?.get(key);
  }

  /** When `who`'s first ACK covering `index` arrived. */
  ackAt(who: string, index: number): number | undefined {
    const a = this.acks.get(who);
    if (!a) return undefined;
    let lo = 0;
    let hi = a.keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (a.keys[mid]! < index) lo = mid + 1;
      else hi = mid;
    }
    return lo < a.keys.length ? a.earliest[lo] : undefined;
  }
}

export interface Summary {
  p50: number;
  p99: number;
}

export interface StageResult {
  name: string;
  prev?: string;
  /** Puts with this stage (and its previous) stamped. */
  count: number;
  /** µs since `prev`. */
  since?: Summary;
  /**
   * Puts where this stage came before `prev`: each `prev` is a cause of its stage (same process,
   * or the message that carried the write), so anything but 0 means the stamps are wrong.
   */
  beforePrev: number;
  /** µs since the client sent the request. */
  cumulative: Summary;
}

export interface Breakdown {
  puts: number;
  stages: StageResult[];
  /** Client-measured µs per put. */
  total: Summary & { mean: number };
  /** Puts missing each stage (0 everywhere when every put has every stage). */
  missing: Record<string, number>;
  /** Puts whose stamps of one process are out of the path's order, per process. */
  outOfOrder: Record<string, number>;
  /** Cluster: how often each follower's ACK came first. */
  firstAck?: Record<string, number>;
}

function summary(values: number[]): Summary {
  const sorted = Float64Array.from(values).sort();
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
}

/**
 * Joins the client's puts with the stage files. `leaderNode`: the node id whose gateway took
 * the puts (single node: the only one).
 */
export function joinBreakdown(files: StageFile[], puts: ClientPut[], leaderNode: string, cluster: boolean): Breakdown {
  const defs = stageDefs(cluster);
  const grouped = new Map<string, Map<string, StageFile[]>>();
  for (const f of files) {
    let m = grouped.get(f.node);
    if (!m) grouped.set(f.node, (m = new Map()));
    m.set(f.process, [...(m.get(f.process) ?? []), f]);
  }
  const byNode = new Map<string, Map<string, Stamps>>();
  for (const [node, m] of grouped) byNode.set(node, new Map([...m].map(([proc, fs]) => [proc, new Stamps(fs)])));
  const lead = byNode.get(leaderNode) ?? new Map<string, Stamps>();
  const followers = [...byNode.keys()].filter((n) => n !== leaderNode && byNode.get(n)!.has('peer'));
  const indexOf = new Map<number, number>();
  for (const [index, revision] of lead.get('storage')?.links ?? []) indexOf.set(revision, index);

  const times = defs.map(() => new Float64Array(puts.length).fill(NaN));
  const firstAck: Record<string, number> = {};
  puts.forEach((put, p) => {
    const index = indexOf.get(put.revision);
    let acks: { who: string; at: number }[] = [];
    if (cluster && index !== undefined) {
      const peer = lead.get('peer');
      for (const who of followers) {
        const at = peer?.ackAt(who, index);
        if (at !== undefined) acks.push({ who, at });
      }
      acks = acks.sort((a, b) => a.at - b.at);
      if (acks.length) firstAck[acks[0]!.who] = (firstAck[acks[0]!.who] ?? 0) + 1;
    }
    const chosen = acks.length ? byNode.get(acks[0]!.who) : undefined;
    defs.forEach((d, s) => {
      const src = d.source;
      let t: number | undefined;
      if (src.kind === 'client') t = src.which === 'send' ? put.send : put.receive;
      else if (src.kind === 'ack') t = acks.length === followers.length && acks.length ? acks[src.which === 'first' ? 0 : acks.length - 1]!.at : undefined;
      else {
        const key = src.key === 'revision' ? put.revision : index;
        const from = src.on === 'leader' ? lead : chosen;
        t = key === undefined ? undefined : from?.get(src.process)?.get(src.stage, key);
      }
      if (t !== undefined) times[s]![p] = t;
    });
  });

  const col = new Map(defs.map((d, s) => [d.name, s]));
  const missing: Record<string, number> = {};
  const outOfOrder: Record<string, number> = {};
  const stages: StageResult[] = defs.map((d, s) => {
    const since: number[] = [];
    const cumulative: number[] = [];
    const prev = d.prev === undefined ? undefined : col.get(d.prev);
    let miss = 0;
    let beforePrev = 0;
    for (let p = 0; p < puts.length; p++) {
      const t = times[s]![p]!;
      if (Number.isNaN(t)) {
        miss++;
        continue;
      }
      cumulative.push(t - puts[p]!.send);
      if (prev !== undefined && !Number.isNaN(times[prev]![p]!)) {
        since.push(t - times[prev]![p]!);
        if (t < times[prev]![p]!) beforePrev++;
      }
    }
    missing[d.name] = miss;
    return { name: d.name, prev: d.prev, count: puts.length - miss, since: prev === undefined ? undefined : summary(since), beforePrev, cumulative: summary(cumulative) };
  });
  // Within one process the stamps follow the path's order (across processes, on a cluster,
  // some overlap: see STAGES).
  const chains = new Map<Chain, number[]>();
  defs.forEach((d, s) => chains.set(d.chain, [...(chains.get(d.chain) ?? []), s]));
  for (const [chain, cols] of chains) {
    let bad = 0;
    for (let p = 0; p < puts.length; p++) {
      let last = -Infinity;
      for (const s of cols) {
        const t = times[s]![p]!;
        if (Number.isNaN(t)) continue;
        if (t < last) {
          bad++;
          break;
        }
        last = t;
      }
    }
    outOfOrder[chain] = bad;
  }
  const totals = puts.map((p) => p.receive - p.send);
  const mean = totals.reduce((a, b) => a + b, 0) / Math.max(1, totals.length);
  return { puts: puts.length, stages, total: { ...summary(totals), mean }, missing, outOfOrder, ...(cluster && { firstAck }) };
}

/** The table `npm run breakdown` prints. */
export function formatBreakdown(b: Breakdown, etcd?: Summary & { mean: number }): string {
  const us = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? '-' : v.toFixed(0));
  const rows: string[][] = [['stage', 'since', 'Δ p50 µs', 'Δ p99 µs', 'cum p50 µs', 'cum p99 µs']];
  for (const s of b.stages) rows.push([s.name, s.prev ?? '', us(s.since?.p50), us(s.since?.p99), us(s.cumulative.p50), us(s.cumulative.p99)]);
  rows.push(['kvs total (client-measured)', '', '', '', us(b.total.p50), us(b.total.p99)]);
  if (etcd) rows.push(['etcd 3.4 total (client-measured)', '', '', '', us(etcd.p50), us(etcd.p99)]);
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const line = (r: string[]) => r.map((v, c) => (c < 2 ? v.padEnd(widths[c]!) : v.padStart(widths[c]!))).join('  ');
  return [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n');
}
