// The etcd3 npm client's elections (`campaign()`, `proclaim()`, `resign()`, `leader()`,
// `observe()`) as scenarios to run many times against a server (election-client.test.ts runs
// them against kvs and etcd). They are those of the client's own suite (microsoft/etcd3,
// src/test/election.test.ts, with its beforeEach and afterEach), with its settings: a TTL of
// 1 s and no fault handling (no retry, no circuit breaker), so a call that fails fails the
// scenario instead of being retried. Its fixed sleeps are replaced by the client's own
// '_isWaiting' event, and one scenario adds several Election objects on one client.
//
// These scenarios open and close many connections: an Etcd3 client's service clients share
// one HTTP/2 connection (grpc-js's subchannel pool), the client closes them all (so sends
// GOAWAY) whenever a watch stream ends with an error, its own cancel of an election's last
// watcher included, and a call it starts in the same turn reaches the server right after that
// GOAWAY. kvs refused those calls
// (docs/journal/2026-11-23.md#a-clients-goaway-and-the-election-scenarios).
import assert from 'node:assert/strict';
import { ClientClosedError, Etcd3, Election, NotCampaigningError, type Campaign, type ElectionObserver } from 'etcd3';
import { noop } from 'cockatiel';

/** A scenario that takes longer than this has hung (a lost event); it counts as a failure. */
const SCENARIO_TIMEOUT_MS = 15_000;

/** One run of a scenario: its clients, and every error any of its objects emitted. */
class Run {
  private readonly clients: Etcd3[] = [];
  private readonly observers: ElectionObserver[] = [];
  private readonly campaigns: Campaign[] = [];
  private fail!: (err: unknown) => void;
  /** Rejects with the first error a campaign or observer emits (the scenario fails at once). */
  readonly failed = new Promise<never>((_, reject) => (this.fail = reject));

  constructor(private readonly endpoint: string) {
    this.failed.catch(() => undefined); // a failure after the scenario ended is nobody's
  }

  /** A client with the etcd3 suite's settings (no fault handling). */
  client(): Etcd3 {
    const c = new Etcd3({ hosts: `http://${this.endpoint}`, faultHandling: { host: () => noop, global: noop } });
    this.clients.push(c);
    return c;
  }

  election(c: Etcd3, name = 'test-election'): Election {
    return new Election(c, name, 1);
  }

  campaign(e: Election, value: string): Campaign {
    const c = e.campaign(value);
    c.on('error', (err) => this.error(err));
    this.campaigns.push(c);
    return c;
  }

  async observe(e: Election): Promise<ElectionObserver> {
    const o = await e.observe();
    o.on('error', (err) => this.error(err));
    this.observers.push(o);
    return o;
  }

  /**
   * An error a campaign or an observer emitted. Those of a client the scenario closed
   * (ClientClosedError: its campaigns and observers stop) are what closing means.
   */
  private error(err: unknown): void {
    if (!(err instanceof ClientClosedError)) this.fail(err);
  }

  /**
   * Stops whatever the scenario left running, then closes every client. etcd3's watch manager
   * reconnects for as long as a watcher is attached, even to a closed client, and its timers
   * would keep the test process alive: so observers are cancelled, campaigns resigned and the
   * election keys deleted (a campaign still waiting for an older contender stops once that key
   * is gone) while the clients are open. Bounded, for a scenario that failed with a server
   * that no longer answers.
   */
  async teardown(): Promise<void> {
    const steps = (async () => {
      await Promise.all(this.observers.map((o) => o.cancel().catch(() => undefined)));
      await Promise.all(this.campaigns.map((c) => c.resign().catch(() => undefined)));
      await this.clients[0]?.delete().all().catch(() => undefined);
    })();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([steps, new Promise((resolve) => (timer = setTimeout(resolve, SCENARIO_TIMEOUT_MS)))]);
    clearTimeout(timer);
    for (const c of this.clients) c.close();
  }
}

/** The client suite's beforeEach: a client, an election, and a campaign that won it. */
interface Fixture {
  run: Run;
  client: Etcd3;
  election: Election;
  campaign: Campaign;
}

type Scenario = (f: Fixture) => Promise<void>;

function once<T = unknown>(emitter: { once(event: string, fn: (v: T) => void): unknown }, event: string): Promise<T> {
  return new Promise((resolve) => emitter.once(event, resolve));
}

function rejects<E>(p: Promise<unknown>, type: new (...a: any[]) => E): Promise<void> {
  return p.then(
    () => assert.fail(`expected ${type.name}`),
    (err) => assert.ok(err instanceof type, `expected ${type.name}, got ${err}`),
  );
}

const SCENARIOS: Record<string, Scenario> = {
  // campaign: three clients queue up; each resign hands leadership to the next in line.
  async 'campaign: waits until elected, in order'({ run, election, campaign }) {
    const c2 = run.client();
    const c3 = run.client();
    const campaign2 = run.campaign(run.election(c2), 'candidate2');
    let phase = 0;
    const elected2 = campaign2.wait().then(async () => {
      assert.equal(phase, 1);
      assert.equal(await election.leader(), 'candidate2');
    });
    await once(campaign2, '_isWaiting');
    const campaign3 = run.campaign(run.election(c3), 'candidate3');
    const elected3 = campaign3.wait().then(async () => {
      assert.equal(phase, 2);
      assert.equal(await election.leader(), 'candidate3');
    });
    await once(campaign3, '_isWaiting');
    phase = 1;
    await campaign.resign();
    await elected2;
    phase = 2;
    await campaign2.resign();
    await elected3;
    await campaign3.resign();
  },

  async 'campaign: proclaims the initial value'({ client, campaign }) {
    assert.equal(await client.get(await campaign.getCampaignKey()), 'candidate');
  },

  async 'proclaim: updates while campaigning'({ client, campaign }) {
    const key = await campaign.getCampaignKey();
    assert.equal(await client.get(key), 'candidate');
    await campaign.proclaim('new-candidate');
    assert.equal(await client.get(key), 'new-candidate');
  },

  async 'proclaim: refused once resigned'({ campaign }) {
    await campaign.resign();
    await rejects(campaign.proclaim('new-candidate'), NotCampaigningError);
  },

  async 'proclaim: refused when the key was tampered with'({ client, campaign }) {
    await client.delete().key(await campaign.getCampaignKey());
    await rejects(campaign.proclaim('new-candidate'), NotCampaigningError);
  },

  async 'proclaim: a change during the initial publish'(f) {
    await f.campaign.resign();
    f.campaign = f.run.campaign(f.election, 'old-value');
    const key = await f.campaign.getCampaignKey();
    await f.campaign.proclaim('new-value');
    assert.equal(await f.client.get(key).string(), 'new-value');
  },

  async 'leader: the leader value, then none after resign'({ election, campaign }) {
    assert.equal(await election.leader(), 'candidate');
    await campaign.resign();
    assert.equal(await election.leader(), undefined);
  },

  async 'observe: the leader resigns with another in line'({ run, election, campaign }) {
    const c2 = run.client();
    const observer = await run.observe(election);
    assert.equal(observer.leader(), 'candidate');
    const campaign2 = run.campaign(run.election(c2), 'candidate2');
    await once(campaign2, '_isWaiting');
    const [leader] = await Promise.all([once(observer, 'change'), campaign.resign()]);
    assert.equal(leader, 'candidate2');
    await observer.cancel();
    await campaign2.resign();
  },

  async 'observe: the leader steps down'({ run, election, campaign }) {
    const observer = await run.observe(election);
    assert.equal(observer.leader(), 'candidate');
    const [leader] = await Promise.all([once(observer, 'change'), campaign.resign()]);
    assert.equal(leader, undefined);
    await observer.cancel();
  },

  async 'observe: a leader is newly elected'({ run, election, campaign }) {
    await campaign.resign();
    const observer = await run.observe(election);
    assert.equal(observer.leader(), undefined);
    const campaign2 = run.campaign(election, 'candidate');
    const [, leader] = await Promise.all([campaign2.wait(), once(observer, 'change')]);
    assert.equal(leader, 'candidate');
    await campaign2.resign();
    await observer.cancel();
  },

  // Two more Election objects on the fixture's client: a second one for the same election
  // (observing it, and queueing a campaign in it) and one for another election.
  async 'several Election objects on one client'({ run, client, election, campaign }) {
    const same = run.election(client);
    const other = run.election(client, 'other-election');
    const observer = await run.observe(same);
    assert.equal(observer.leader(), 'candidate');
    const otherCampaign = await run.campaign(other, 'other-leader').wait();
    assert.equal(await other.leader(), 'other-leader');
    assert.equal(await election.leader(), 'candidate');
    const queued = run.campaign(same, 'candidate2');
    const elected = queued.wait();
    await once(queued, '_isWaiting');
    const [leader] = await Promise.all([once(observer, 'change'), campaign.resign()]);
    assert.equal(leader, 'candidate2');
    await elected;
    assert.equal(await election.leader(), 'candidate2');
    assert.equal(await other.leader(), 'other-leader');
    await observer.cancel();
    await queued.resign();
    await otherCampaign.resign();
  },

  // etcd3's issue 176: a contender in the middle of the line resigns; nobody else may think
  // the leadership changed. Then two clients are closed with their observers still running.
  async 'observe: a waiting contender resigns, then clients close (etcd3 #176)'({ run, election, campaign }) {
    const observer1 = await run.observe(election);
    const c2 = run.client();
    const election2 = c2.election('test-election', 1);
    const observer2 = await run.observe(election2);
    const campaign2 = run.campaign(election2, 'candidate2');
    await once(campaign2, '_isWaiting');
    const c3 = run.client();
    const election3 = c3.election('test-election', 1);
    const observer3 = await run.observe(election3);
    const campaign3 = run.campaign(election3, 'candidate3');
    await once(campaign3, '_isWaiting');
    for (const o of [observer1, observer2, observer3]) assert.equal(o.leader(), 'candidate');

    const changes: string[] = [];
    campaign.on('elected', () => changes.push('leader is now 1'));
    campaign3.on('elected', () => changes.push('leader is now 3'));
    // campaign3 waits on campaign2's key; once it is deleted, campaign3 looks again and
    // waits on the leader's: that second wait is the point where a wrong change would show.
    const rewaited = once(campaign3, '_isWaiting');
    await campaign2.resign();
    await rewaited;
    assert.equal(observer1.leader(), 'candidate');
    assert.equal(observer3.leader(), 'candidate');
    assert.deepEqual(changes, []);
    // campaign3 stops waiting once it has resigned and the leader's key is gone ('elected' is
    // its campaign loop ending); then two clients close with their observers still running.
    const stopped = once(campaign3, 'elected');
    await campaign3.resign();
    await campaign.resign();
    await stopped;
    await observer1.cancel();
    c2.close();
    c3.close();
  },
};

/** One scenario with the suite's beforeEach and afterEach around it; its error, if any. */
async function runScenario(endpoint: string, scenario: Scenario): Promise<unknown> {
  const run = new Run(endpoint);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`scenario still running after ${SCENARIO_TIMEOUT_MS} ms`)), SCENARIO_TIMEOUT_MS);
  });
  try {
    await Promise.race([
      timeout,
      run.failed,
      (async () => {
        const client = run.client();
        const election = run.election(client);
        const campaign = await run.campaign(election, 'candidate').wait();
        const f: Fixture = { run, client, election, campaign };
        await scenario(f);
        // afterEach: resign, delete every key, close.
        await f.campaign.resign();
        await client.delete().all();
      })(),
    ]);
    return undefined;
  } catch (err) {
    return err;
  } finally {
    clearTimeout(timer);
    await run.teardown();
  }
}

export interface Tally {
  runs: number;
  failures: Map<string, string[]>;
}

/** Every scenario (or those whose name contains `only`) `rounds` times against `endpoint`, one at a time. */
export async function runScenarios(endpoint: string, rounds: number, only?: string): Promise<Tally> {
  const tally: Tally = { runs: 0, failures: new Map() };
  for (let r = 0; r < rounds; r++) {
    for (const [name, scenario] of Object.entries(SCENARIOS)) {
      if (only && !name.includes(only)) continue;
      tally.runs++;
      const err = await runScenario(endpoint, scenario);
      if (err === undefined) continue;
      const list = tally.failures.get(name) ?? [];
      list.push(String((err as Error)?.message ?? err));
      tally.failures.set(name, list);
    }
  }
  return tally;
}

export function report(tally: Tally): string {
  const n = [...tally.failures.values()].reduce((s, l) => s + l.length, 0);
  const lines = [`${n} of ${tally.runs} scenario runs failed`];
  for (const [name, errs] of tally.failures) lines.push(`  ${name}: ${errs.length}× ${[...new Set(errs)].join(' | ')}`);
  return lines.join('\n');
}

