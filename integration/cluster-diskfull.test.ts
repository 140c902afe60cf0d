// A follower's disk fills up under load (docs/cluster.md "A follower's full disk"): its data
// directory is a small tmpfs, filled past storage's free-space floor while clients write through
// the leader. The follower takes no more entries and sends no ACK, the leader counts it as
// disconnected and keeps acknowledging (through the object store), no process dies (LMDB writes
// through a memory map: a full disk would SIGBUS it), and once the space is back the follower
// catches up by itself and serves every acknowledged write.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { freePort, onCleanup, pollUntil, runCommand, status, tempDir } from '../testkit/harness.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';
import { Load } from './load.js';
import { onceClient, within } from './fencing-helpers.js';
import { get, scrape, value } from '../testkit/metrics-scrape.js';
import { MIN_FREE_BYTES } from '../services/storage/disk-space.js';

const lines = (out: string, re: RegExp) => out.split('\n').filter((l) => re.test(l));

test('a follower whose disk fills stops taking entries, the leader goes on without it, and it catches up once space is back', async (t) => {
  // No silent skip: the scenario needs a small filesystem of its own.
  assert.equal(process.getuid?.(), 0, 'this test needs root: it mounts a small tmpfs as a follower\'s data directory');
  const mnt = await tempDir(t, 'kvs-follower-fs-');
  const mounted = await runCommand('mount', ['-t', 'tmpfs', '-o', 'size=128m', 'tmpfs', mnt]);
  assert.equal(mounted.exitCode, 0, `mount -t tmpfs failed (this test needs root for a tmpfs mount): ${mounted.stderr.trim()}`);
  // Registered before the nodes start: it runs after they have stopped (cleanups run in reverse).
  onCleanup(t, async () => {
    const r = await runCommand('umount', [mnt]);
    if (r.exitCode !== 0) await runCommand('umount', ['-l', mnt]);
  });
  const free = () => {
    const s = fs.statfsSync(mnt);
    return s.bavail * s.bsize;
  };

  const metrics = new Map<string, string>();
  const cluster = await startCluster(t, 3, {
    dataDir: (id) => (id === 'n2' ? path.join(mnt, 'data') : undefined),
    nodeArgs: async (id) => {
      const addr = `127.0.0.1:${await freePort()}`;
      metrics.set(id, addr);
      return ['--metrics-addr', addr];
    },
  });
  const leader = await waitForLeader(cluster.nodes);
  const full = cluster.nodes.find((n) => n.id === 'n2')!;
  assert.notEqual(leader, full, 'n1 starts first and leads');
  // What the nodes said, for a failure's message.
  const said = () => cluster.nodes.map((n) => `--- ${n.id}:\n${lines(n.kvs.output(), /"level":(40|50|60)|SIG|exit/).slice(-25).join('\n')}`).join('\n');
  let passed = false;
  t.after(() => {
    if (!passed) console.log(said());
  });
  const degraded = async () => value(await scrape(metrics.get(leader.id)!), 'kvs_replication_degraded');
  await pollUntil('every follower caught up (not degraded)', async () => ((await degraded()) === 0 ? true : undefined), 30_000);

  const load = new Load(t, leader.endpoint, 4);
  onCleanup(t, () => load.stop()); // (before its clients close, should the test fail)
  await load.untilAcked(200);
  const leaderMark = leader.kvs.output().length;

  // Full: nothing left (far below the default floor, 64 MiB of the tmpfs's 128). Before the
  // follower honoured the floor, storage crash-looped with SIGBUS here (LMDB applying committed
  // entries through its memory map); with a few hundred KiB left, its WAL append failed with
  // ENOSPC several times a second, each time reconnecting to the leader.
  const filler = path.join(mnt, 'filler');
  fs.writeFileSync(filler, Buffer.alloc(free()));
  assert.ok(free() < MIN_FREE_BYTES, `the tmpfs has ${free()} bytes free, below the floor`);
  const refusal = /taking no replicated entries/;
  await pollUntil('the full follower says why it takes no entries', async () => (lines(full.kvs.output(), refusal).length ? true : undefined), 20_000);
  const line = lines(full.kvs.output(), refusal)[0]!;
  assert.match(line, /"level":50.*MiB free on the filesystem of .*data.*, below the floor of 64\.0 MiB/, line);
  assert.ok(line.includes(`"dir":"${path.join(mnt, 'data')}`), `the line names the directory: ${line}`);
  await pollUntil('the leader drops the full follower', async () => {
    const dropped = lines(leader.kvs.output().slice(leaderMark), /follower disconnected/).some((l) => l.includes('"follower":"n2"'));
    return dropped && (await degraded()) === 1 ? true : undefined;
  }, 20_000);

  // What would wait for the full follower to apply is refused at once, saying why: a write
  // through it (the leader would take it, but this node could not show it to a read after it)
  // and a linearizable read. (They used to wait until the client's deadline.)
  const direct = onceClient(t, full.endpoint);
  for (const [what, call] of [
    ['a write through the full follower', () => direct.put('through/full').value('v').options(within(20_000)).exec()],
    ['a linearizable read on the full follower', () => direct.get('load/0').options(within(20_000)).exec()],
  ] as const) {
    const started = performance.now();
    await assert.rejects(call(), (err: Error) => {
      assert.match(err.message, /storage refuses writes: .* free on the filesystem of .*; this follower applies nothing meanwhile/, `${what}: ${err.message}`);
      return true;
    });
    assert.ok(performance.now() - started < 3000, `${what} was refused after ${Math.round(performance.now() - started)} ms`);
  }
  assert.equal(await leader.client.get('through/full').string(), null, 'the refused write was not made');

  // Writes go on (each batch is uploaded first: the leader is degraded), the follower stays put.
  const stuckAt = Number((await full.client.maintenance.status()).header.revision);
  const acked = load.acked.length;
  await load.untilAcked(acked + 300, 30_000);
  assert.equal(Number((await full.client.maintenance.status()).header.revision), stuckAt, 'the full follower applies nothing');
  const readyz = await get(metrics.get(full.id)!, '/readyz');
  assert.equal(readyz.status, 503, readyz.body);
  assert.match(readyz.body, /storage refuses writes: .* free/);
  const local = await full.client.getAll().prefix('load/').serializable(true).exec();
  assert.equal(Number(local.header.revision), stuckAt, 'it serves serializable reads of what it had');
  assert.ok(local.kvs.length > 0);
  const ahead = Number((await leader.client.maintenance.status()).header.revision);
  assert.ok(ahead > stuckAt, `the leader (revision ${ahead}) went on without the full follower (${stuckAt})`);
  assert.equal(lines(full.kvs.output(), refusal).length, 1, `one line, not a loop:\n${lines(full.kvs.output(), /"level":(40|50|60)/).join('\n')}`);
  for (const node of cluster.nodes) {
    const s = await status(node.kvs);
    for (const c of s.components) assert.equal(c.restarts, 0, `${node.id}: ${c.name} restarted (last exit: ${c.lastExit})`);
  }
  assert.doesNotMatch(full.kvs.output(), /SIGBUS|ENOSPC/);

  // Space is back: the follower reattaches by itself, catches up, and holds every acknowledged write.
  fs.rmSync(filler);
  await pollUntil('the follower says the space is back', async () => (lines(full.kvs.output(), /free space is back/).length ? true : undefined), 20_000);
  await load.untilAcked(load.acked.length + 100, 30_000);
  await load.stop();
  assert.equal(load.failed.length, 0, load.summary());
  const final = Number((await leader.client.maintenance.status()).header.revision);
  await pollUntil(`the follower reaches the leader's revision ${final}`, async () => (Number((await full.client.maintenance.status()).header.revision) >= final ? true : undefined), 30_000);
  const got = await full.client.getAll().prefix('load/').serializable(true).exec();
  assert.equal(Number(got.header.revision), final);
  const kvs = new Map(got.kvs.map((kv) => [kv.key.toString(), kv]));
  for (const a of load.acked) {
    const kv = kvs.get(a.key);
    assert.ok(kv, `acknowledged ${a.key} (revision ${a.revision}) is missing on the follower`);
    assert.equal(kv.value.toString(), a.value);
    assert.equal(Number(kv.mod_revision), a.revision);
  }
  // And it takes writes and linearizable reads again.
  await direct.put('through/full').value('back').options(within(10_000)).exec();
  assert.equal(await direct.get('through/full').options(within(10_000)).string(), 'back');
  await pollUntil('the follower is ready again', async () => ((await get(metrics.get(full.id)!, '/readyz')).status === 200 ? true : undefined), 30_000);
  await pollUntil('the leader is no longer degraded', async () => ((await degraded()) === 0 ? true : undefined), 30_000);
  for (const c of (await status(full.kvs)).components) assert.equal(c.restarts, 0, `n2: ${c.name} restarted (last exit: ${c.lastExit})`);
  // No loop of errors from the follower while its disk was full.
  const errors = lines(full.kvs.output(), /"level":(50|60)/);
  assert.ok(errors.length <= 1, `the follower logged ${errors.length} errors:\n${errors.join('\n')}`);
  passed = true;
});
