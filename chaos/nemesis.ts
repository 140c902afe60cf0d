// The nemeses: faults injected into a running system (system.ts), each one held for a while
// and then healed. Which fault, on which node, in which mode and for how long all come from the
// run's seeded random source, so a run can be replayed with its seed (timing still varies).
//
//   kill-leader      kill -9 of the leader node's whole process group; restarted at heal
//   kill-follower    kill -9 of a follower node (cluster)
//   kill-component   kill -9 of one component (storage, gateway, archiver, peer) of any node;
//                    its supervisor restarts it, heal waits for that
//   pause            SIGSTOP of a node's process group, long enough for failure detection; SIGCONT
//   partition-peer   one follower cut from the leader (both directions of the peer port,
//                    refused or black-holed) (cluster)
//   partition-client one node's client port refused or black-holed for the workload
//   store-outage     the object store refuses or hangs for every node
//   isolate-leader   the leader cut from both followers and from the object store at once;
//                    its clients can still reach it (cluster)
import type { ChaosNode, ChaosSystem } from './system.js';
import type { ProxyMode } from '../testkit/proxy.js';

export const NEMESES = ['kill-leader', 'kill-follower', 'kill-component', 'pause', 'partition-peer', 'partition-client', 'store-outage', 'isolate-leader'] as const;
export type NemesisName = (typeof NEMESES)[number];
const CLUSTER_ONLY: readonly NemesisName[] = ['kill-follower', 'partition-peer', 'isolate-leader'];

/** The nemeses that make sense for `nodes` nodes. */
export function applicable(names: readonly NemesisName[], nodes: number): NemesisName[] {
  return names.filter((n) => nodes > 1 || !CLUSTER_ONLY.includes(n));
}

/** One fault as it happened. Times are monotonic ns (the workload's clock). */
export interface FaultRecord {
  readonly nemesis: NemesisName;
  /** What exactly, e.g. `kill -9 n2`, `n3 cut from leader n1 (hang)`. */
  readonly what: string;
  readonly injected: bigint;
  readonly healed: bigint;
  /** When every node acknowledged a write again after the heal. */
  readonly recovered: bigint;
}

type Heal = () => Promise<void>;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function pick<T>(rand: () => number, items: readonly T[]): T {
  return items[Math.floor(rand() * items.length)]!;
}

function faultMode(rand: () => number): ProxyMode {
  return rand() < 0.5 ? 'refuse' : 'hang';
}

function signalGroup(node: ChaosNode, signal: NodeJS.Signals): void {
  try {
    process.kill(-node.kvs.pid, signal);
  } catch {
    // gone already
  }
}

/** Injects `name`; returns a description and how to heal it. */
async function inject(name: NemesisName, sys: ChaosSystem, rand: () => number): Promise<{ what: string; hold: number; heal: Heal }> {
  const leader = (await sys.leader(30_000)) ?? sys.nodes[0]!;
  const followers = sys.nodes.filter((n) => n !== leader);
  switch (name) {
    case 'kill-leader':
    case 'kill-follower': {
      const victim = name === 'kill-leader' ? leader : pick(rand, followers);
      await victim.kvs.kill9();
      return { what: `kill -9 ${victim.id}`, hold: holdFor('kill', rand), heal: () => victim.kvs.restart() };
    }
    case 'kill-component': {
      const node = pick(rand, sys.nodes);
      const names = ['storage', 'gateway', 'archiver', ...(node.peer ? ['peer'] : [])];
      const component = pick(rand, names);
      const before = await sys.componentPid(node, component);
      process.kill(before.pid, 'SIGKILL');
      const role = node === leader ? 'leader' : 'follower';
      return {
        what: `kill -9 ${node.id} (${sys.nodes.length > 1 ? role : 'single'}) ${component}`,
        hold: holdFor('kill', rand),
        heal: async () => {
          const deadline = Date.now() + 60_000;
          while (Date.now() < deadline) {
            const now = await sys.componentPid(node, component).catch(() => undefined);
            if (now && now.pid !== before.pid && now.state === 'ready') return;
            await sleep(100);
          }
          throw new Error(`${node.id}'s supervisor did not restart ${component} within 60 s`);
        },
      };
    }
    case 'pause': {
      const node = pick(rand, sys.nodes);
      signalGroup(node, 'SIGSTOP');
      // A paused follower is noticed by the leader's ACK timeout; a paused leader only by silence.
      const hold = holdFor(node === leader && sys.nodes.length > 1 ? 'silent' : 'refused', rand);
      return { what: `SIGSTOP ${node.id}${node === leader && sys.nodes.length > 1 ? ' (leader)' : ''}`, hold, heal: async () => signalGroup(node, 'SIGCONT') };
    }
    case 'partition-peer': {
      const follower = pick(rand, followers);
      const mode = faultMode(rand);
      leader.peer!.setFor(follower.id, mode);
      follower.peer!.setFor(leader.id, mode);
      return {
        what: `${follower.id} cut from leader ${leader.id} (${mode})`,
        hold: holdFor(mode === 'hang' ? 'silent' : 'refused', rand),
        heal: async () => {
          leader.peer!.heal();
          follower.peer!.heal();
        },
      };
    }
    case 'partition-client': {
      const node = pick(rand, sys.nodes);
      const mode = faultMode(rand);
      node.client.set(mode);
      return { what: `${node.id} client port ${mode}`, hold: holdFor('outage', rand), heal: async () => node.client.heal() };
    }
    case 'store-outage': {
      const mode = faultMode(rand);
      await sys.storeFault(mode);
      return { what: `object store ${mode}`, hold: holdFor('outage', rand), heal: () => sys.storeFault('pass') };
    }
    case 'isolate-leader': {
      const mode = faultMode(rand);
      leader.peer!.set(mode);
      for (const f of followers) f.peer!.setFor(leader.id, mode);
      await sys.storeFault(mode, leader);
      return {
        what: `leader ${leader.id} cut from followers and store (${mode})`,
        hold: holdFor(mode === 'hang' ? 'silent' : 'refused', rand),
        heal: async () => {
          for (const n of sys.nodes) n.peer!.heal();
          await sys.storeFault('pass');
        },
      };
    }
  }
}

/**
 * How long faults are held, ms (a random part is added). A cut or a pause must outlast failure
 * detection for a takeover to happen during it: against a refusing leader that is the retries
 * (3 x 300 ms) alongside the TTL (1.5 s); against a silent one (black hole, SIGSTOP) each retry
 * first waits out 3 s without a message (services/peer/follower.ts), so about 10 s.
 */
const HOLD = { kill: 1000, outage: 2000, refused: 4000, silent: 10_500 } as const;

function holdFor(kind: keyof typeof HOLD, rand: () => number): number {
  return Math.round(HOLD[kind] + rand() * 1500);
}

/**
 * Runs faults one after another: each round takes every nemesis once in a seeded order; a
 * quiet gap before each. Stops when `shouldStop()` says so between faults (or after
 * `maxFaults`). `recovered(sinceNs)` resolves with the time every node acknowledged a write.
 */
export async function runNemeses(opts: {
  sys: ChaosSystem;
  names: readonly NemesisName[];
  rand: () => number;
  shouldStop: () => boolean;
  maxFaults?: number;
  recovered: () => Promise<bigint>;
  log: (line: string) => void;
}): Promise<FaultRecord[]> {
  const { sys, rand } = opts;
  const faults: FaultRecord[] = [];
  let round: NemesisName[] = [];
  while (!opts.shouldStop() && faults.length < (opts.maxFaults ?? Infinity)) {
    if (round.length === 0) round = shuffle([...opts.names], rand);
    const name = round.shift()!;
    await sleep(300 + rand() * 700);
    const injected = process.hrtime.bigint();
    const { what, hold, heal } = await inject(name, sys, rand);
    opts.log(`fault ${faults.length + 1}: ${name}: ${what}, held ${hold} ms`);
    await sleep(hold);
    await heal();
    const healed = process.hrtime.bigint();
    const recovered = await opts.recovered();
    faults.push({ nemesis: name, what, injected, healed, recovered });
    const leader = sys.nodes.length > 1 ? `; leader ${(await sys.leader(10_000))?.id ?? 'none agreed'}` : '';
    opts.log(`  healed; writes acknowledged on every node ${ms(recovered - healed)} ms later${leader}`);
  }
  return faults;
}

function shuffle<T>(items: T[], rand: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

export function ms(ns: bigint): number {
  return Number(ns / 1_000_000n);
}
