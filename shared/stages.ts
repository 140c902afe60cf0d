// Stage stamps of the write path, for `npm run breakdown` (bench/breakdown.ts): where one put's
// time goes between the processes of a node (and of a cluster). Off unless KVS_STAGE_TRACE names
// a directory: then each component records (stage, key, time) triples in preallocated typed
// arrays and writes them to <dir>/<process>-<pid>.json when it exits. While it is off, `stages`
// is undefined and a stamp point costs one check (`stages?.stamp(...)`), nothing else.
//
// Times are monotonic microseconds: CLOCK_MONOTONIC is one clock for every process of a
// machine, so stamps of different processes compare. Keys join the stamps of one write across
// processes: the gateway (and the client) know the response's revision, storage and the peer
// agents the WAL index (a batch is keyed by its last index); storage records which revision
// each index ends with (LINK), so that the reader can join the two.
import { writeFileSync, readdirSync, readFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';

/** Every stage a process stamps. The numbers are the files' stage ids (names are in the file too). */
export const Stage = {
  /** Storage: index (aux) → revision is recorded as LINK(key = index, aux = revision). */
  LINK: 0,
  // gateway, keyed by revision
  GATEWAY_RECEIVE: 1,
  GATEWAY_ANSWER_RECEIVED: 2,
  GATEWAY_ANSWER_SENT: 3,
  // storage (leader or single node), keyed by the batch's last WAL index
  STORAGE_RECEIVE: 4,
  STORAGE_EXECUTED: 5,
  STORAGE_TO_PEER: 6,
  STORAGE_WAL_WRITTEN: 7,
  STORAGE_FSYNCED: 8,
  STORAGE_REPLICATED: 9,
  STORAGE_COMMITTED: 10,
  STORAGE_ANSWERED: 11,
  STORAGE_ANSWER_SENT: 12,
  // leader's peer agent, keyed by index; ACK's aux: the follower's label
  PEER_LEADER_RECEIVE: 13,
  PEER_LEADER_SENT: 14,
  PEER_LEADER_ACK: 15,
  PEER_LEADER_REPLICATED: 16,
  // a follower's peer agent and storage, keyed by index
  PEER_FOLLOWER_RECEIVE: 17,
  FOLLOWER_STORAGE_RECEIVE: 18,
  FOLLOWER_WAL_WRITTEN: 19,
  FOLLOWER_FSYNCED: 20,
  FOLLOWER_PROGRESS_SENT: 21,
  PEER_FOLLOWER_ACK_SENT: 22,
} as const;
export type StageId = (typeof Stage)[keyof typeof Stage];

/** Stage names by id, as written in the files. */
export const STAGE_NAMES: readonly string[] = (() => {
  const names: string[] = [];
  for (const [name, id] of Object.entries(Stage)) names[id] = name;
  return names;
})();

// performance.now() and process.hrtime() both read libuv's hrtime (CLOCK_MONOTONIC on Linux);
// performance.now() is relative to this process's start, so its offset is measured once,
// between two hrtime readings (the error is half their distance: well below a microsecond).
const ORIGIN_US = (() => {
  let best = Infinity;
  let origin = 0;
  for (let i = 0; i < 20; i++) {
    const a = process.hrtime.bigint();
    const p = performance.now();
    const b = process.hrtime.bigint();
    const width = Number(b - a);
    if (width < best) {
      best = width;
      origin = Number((a + b) / 2n) / 1000 - p * 1000;
    }
  }
  return origin;
})();

/** CLOCK_MONOTONIC in microseconds (fractional): comparable between processes of one machine. */
export function monotonicMicros(): number {
  return performance.now() * 1000 + ORIGIN_US;
}

/** A performance.now() reading of this process, as monotonicMicros() would have read it. */
export function microsFromPerformance(ms: number): number {
  return ms * 1000 + ORIGIN_US;
}

/** One process's stage file. */
export interface StageFile {
  process: string;
  node: string;
  pid: number;
  /** Names by stage id (the reader does not depend on this build's numbering). */
  stages: string[];
  /** Follower labels by id (PEER_LEADER_ACK's aux). */
  labels: string[];
  stage: number[];
  key: number[];
  time: number[];
  aux: number[];
}

export class StageTrace {
  private stage: Uint8Array;
  private key: Float64Array;
  private time: Float64Array;
  private aux: Float64Array;
  private n = 0;
  private readonly labels: string[] = [];
  private readonly labelIds = new Map<string, number>();

  constructor(
    readonly processName: string,
    readonly node: string,
    readonly dir: string,
    capacity = 1 << 16,
  ) {
    this.stage = new Uint8Array(capacity);
    this.key = new Float64Array(capacity);
    this.time = new Float64Array(capacity);
    this.aux = new Float64Array(capacity);
  }

  get length(): number {
    return this.n;
  }

  /** Records `stage` of the write `key` at `t` (now by default). */
  stamp(stage: StageId, key: number, t = monotonicMicros(), aux = 0): void {
    if (this.n === this.stage.length) this.grow();
    const i = this.n++;
    this.stage[i] = stage;
    this.key[i] = key;
    this.time[i] = t;
    this.aux[i] = aux;
  }

  /** Storage: the batch ending at WAL `index` ends at `revision`. */
  link(index: number, revision: number): void {
    this.stamp(Stage.LINK, index, 0, revision);
  }

  /** A small number for a name (a follower's node id), for `aux`. */
  label(name: string): number {
    let id = this.labelIds.get(name);
    if (id === undefined) {
      id = this.labels.length;
      this.labels.push(name);
      this.labelIds.set(name, id);
    }
    return id;
  }

  private grow(): void {
    const cap = this.stage.length * 2;
    const grown = <T extends Uint8Array | Float64Array>(a: T, make: (n: number) => T): T => {
      const b = make(cap);
      b.set(a as never);
      return b;
    };
    this.stage = grown(this.stage, (n) => new Uint8Array(n));
    this.key = grown(this.key, (n) => new Float64Array(n));
    this.time = grown(this.time, (n) => new Float64Array(n));
    this.aux = grown(this.aux, (n) => new Float64Array(n));
  }

  toJSON(): StageFile {
    const n = this.n;
    return {
      process: this.processName,
      node: this.node,
      pid: process.pid,
      stages: [...STAGE_NAMES],
      labels: [...this.labels],
      stage: Array.from(this.stage.subarray(0, n)),
      key: Array.from(this.key.subarray(0, n)),
      time: Array.from(this.time.subarray(0, n)),
      aux: Array.from(this.aux.subarray(0, n)),
    };
  }

  /** Writes <dir>/<process>-<pid>.json (synchronously: it runs in the 'exit' event). */
  write(): string {
    mkdirSync(this.dir, { recursive: true });
    const file = path.join(this.dir, `${this.processName}-${process.pid}.json`);
    writeFileSync(file, JSON.stringify(this.toJSON()));
    return file;
  }
}

/** This process's trace, while KVS_STAGE_TRACE is set (see startStages); undefined otherwise. */
export let stages: StageTrace | undefined;

/**
 * Called once by a component's main: with KVS_STAGE_TRACE set, starts this process's trace
 * and writes it at exit (every way a component ends goes through process.exit or the end of
 * the event loop, both of which emit 'exit'; a SIGKILL writes nothing).
 */
export function startStages(processName: string, node: string, env: NodeJS.ProcessEnv = process.env): StageTrace | undefined {
  const dir = env.KVS_STAGE_TRACE;
  if (!dir || stages) return stages;
  const trace = new StageTrace(processName, node, dir);
  stages = trace;
  process.on('exit', () => {
    try {
      trace.write();
    } catch (err) {
      process.stderr.write(`kvs: could not write the stage trace to ${dir}: ${(err as Error).message}\n`);
    }
  });
  return trace;
}

/** Every stage file in `dir`, parsed. */
export function readStageFiles(dir: string): StageFile[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as StageFile);
}
