// etcdctl 3.4 against kvs and against a real etcd, side by side: the same commands in the
// same order on two fresh stores must print the same stdout and stderr and exit with the
// same code. Only what legitimately differs between two servers is normalised: cluster and
// member ids, raft term and index, db size, server version, member name and peer URLs,
// the endpoint address, timings, and the timestamp and client id in etcdctl's log lines.
//
// etcdctl 3.4 has no `get --count-only` (it came in 3.5): counts are checked through
// `-w json` here and through the etcd3 client's count() in client.test.ts.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { etcdctl, startEtcd, startEtcdctl, startKvs, type CmdResult } from '../testkit/harness.js';
import { etcdctlSideBySide, lastError, normalise, normaliseText, parseJson } from './etcdctl-compare.js';

test('etcdctl 3.4 prints the same from kvs as from etcd', async (t) => {
  const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);

  const { same, ok } = etcdctlSideBySide(kvs.endpoint, etcd.endpoint);

  await t.test('put and get', async () => {
    assert.equal((await ok(['put', 'a', '1'])).stdout, 'OK\n');
    await ok(['put', 'b', '2']);
    await ok(['put', 'c', 'three']);
    await ok(['put', 'dir/x', 'X']);
    await ok(['put', 'dir/y', 'Y']);
    await ok(['put', 'dir/z', 'Z']);
    await ok(['put', 'a', 'one']);
    await ok(['put', 'spaced', 'hello world']);
    await ok(['put', 'piped'], { input: 'from stdin\nwith a newline' });
    assert.equal((await ok(['put', 'b', 'two', '--prev-kv'])).stdout, 'OK\nb\n2\n');

    assert.equal((await ok(['get', 'a'])).stdout, 'a\none\n');
    assert.equal((await ok(['get', 'missing'])).stdout, '');
    await ok(['get', 'piped']);
    await ok(['get', 'a', '--print-value-only']);
    await ok(['get', 'a', 'c']); // [a, c)
    assert.equal((await ok(['get', 'dir/', '--prefix', '--keys-only'])).stdout, 'dir/x\n\ndir/y\n\ndir/z\n\n');
    await ok(['get', 'b', '--from-key']);
    await ok(['get', '', '--from-key', '--keys-only']);
    await ok(['get', '', '--from-key', '--limit', '3']);
    await ok(['get', 'dir/', '--prefix', '--limit', '2', '-w', 'json']);
    await ok(['get', 'a', '-w', 'json']);
    await ok(['get', 'missing', '-w', 'json']);
    await ok(['get', 'a', '-w', 'fields']);
    await ok(['get', 'a', '--consistency=s']);
  });

  await t.test('get --sort-by and --order', async () => {
    for (const target of ['KEY', 'VERSION', 'CREATE', 'MODIFY', 'VALUE']) {
      for (const order of ['ASCEND', 'DESCEND']) {
        await ok(['get', '', '--from-key', `--sort-by=${target}`, `--order=${order}`, '--keys-only']);
        await ok(['get', '', '--from-key', `--sort-by=${target}`, `--order=${order}`, '--limit', '2', '-w', 'json']);
      }
      await ok(['get', 'dir/', '--prefix', `--sort-by=${target}`]);
    }
    await ok(['get', '', '--from-key', '--order=DESCEND']);
    // The count of a range, whatever the limit.
    const r = await ok(['get', '', '--from-key', '--limit', '1', '-w', 'json']);
    const json = parseJson(r.stdout) as { count: number; more: boolean; kvs: unknown[] };
    assert.equal(json.count, 8); // a b c dir/x dir/y dir/z spaced piped
    assert.equal(json.more, true);
    assert.equal(json.kvs.length, 1);
  });

  await t.test('get --rev', async () => {
    // Revisions: a=2 b=3 c=4 dir/x=5 dir/y=6 dir/z=7 a=8 spaced=9 piped=10 b=11.
    assert.equal((await ok(['get', 'a', '--rev', '2'])).stdout, 'a\n1\n');
    assert.equal((await ok(['get', 'a', '--rev', '8'])).stdout, 'a\none\n');
    assert.equal((await ok(['get', 'piped', '--rev', '9'])).stdout, '');
    await ok(['get', '', '--from-key', '--rev', '5', '-w', 'json']);
    await ok(['get', '', '--from-key', '--rev', '7', '--sort-by=MODIFY', '--order=DESCEND', '--keys-only']);
    await ok(['get', 'dir/', '--prefix', '--rev', '6', '--limit', '1', '-w', 'json']);
    await ok(['get', 'b', '--rev', '1']); // revision 1: the empty store
  });

  await t.test('del', async () => {
    assert.equal((await ok(['del', 'c'])).stdout, '1\n');
    assert.equal((await ok(['del', 'c'])).stdout, '0\n');
    assert.equal((await ok(['del', 'dir/', '--prefix', '--prev-kv'])).stdout, '3\ndir/x\nX\ndir/y\nY\ndir/z\nZ\n');
    await ok(['get', 'dir/', '--prefix']);
    await ok(['put', 'r1', '1']);
    await ok(['put', 'r2', '2']);
    await ok(['put', 'r3', '3']);
    await ok(['del', 'r1', 'r3', '--prev-kv', '-w', 'json']);
    await ok(['del', 'r', '--from-key', '-w', 'json']);
    await ok(['get', '', '--from-key']);
    // The deleted keys are still there in the past.
    await ok(['get', 'dir/', '--prefix', '--rev', '12']);
  });

  await t.test('txn from stdin', async () => {
    await ok(['put', 'balance', '100']);
    await ok(['put', 'owner', 'alice']);
    // Interactive mode: compares, blank line, success ops, blank line, failure ops, blank line.
    const transfer = [
      'value("balance") = "100"',
      'version("owner") > "0"',
      '',
      'put balance "40"',
      'put ledger "paid 60 to bob"',
      'get balance',
      'del owner --prev-kv',
      '',
      'put audit "refused"',
      '',
      '',
    ].join('\n');
    const r = await ok(['txn', '-i'], { input: transfer });
    assert.match(r.stdout, /^compares:\nsuccess requests \(get, put, del\):\nfailure requests \(get, put, del\):\nSUCCESS\n/);
    await ok(['get', '', '--from-key']);
    // The same txn again: the compares fail, the failure branch runs.
    assert.match((await ok(['txn', '-i'], { input: transfer })).stdout, /FAILURE\n\nOK\n$/);
    // Non-interactive mode reads the same sections without prompts; with json output.
    await ok(['txn', '-w', 'json'], { input: 'mod("ledger") > "0"\ncreate("audit") != "0"\n\nget ledger\nput n "1"\n\nget audit --rev 2\n\n' });
    // (No lease("k") compare: etcdctl 3.4 itself panics parsing one.)
    await ok(['txn'], { input: 'mod("nope") = "0"\nvalue("balance") < "5"\n\nget "" --from-key --keys-only\n\ndel balance\n\n' });
    // No compares: the success branch.
    await ok(['txn'], { input: '\nput t1 "a"\nput t2 "b"\n\n\n' });
    // A txn that writes nothing keeps the revision.
    await ok(['txn', '-w', 'json'], { input: 'value("t1") = "a"\n\nget t --prefix\n\n\n' });
    // A range at a future revision inside a txn fails the whole txn (and writes nothing).
    const future = await same(['txn'], { input: '\nput t3 "c"\nget t1 --rev 1000\n\n\n' });
    assert.notEqual(future.kvs.exitCode, 0);
    assert.equal(lastError(future.kvs), 'Error: etcdserver: mvcc: required revision is a future revision');
    // Putting a key twice in one branch.
    const dup = await same(['txn'], { input: '\nput t4 "1"\nput t4 "2"\n\n\n' });
    assert.notEqual(dup.kvs.exitCode, 0);
    assert.equal(lastError(dup.kvs), 'Error: etcdserver: duplicate key given in txn request');
    await ok(['get', 't', '--prefix', '-w', 'json']);
  });

  await t.test('compact and reads around the compacted revision', async () => {
    const status = parseJson((await ok(['get', 'a', '-w', 'json'])).stdout) as { header: { revision: number } };
    const head = status.header.revision;
    assert.equal((await ok(['compact', String(head - 2)])).stdout, `compacted revision ${head - 2}\n`);
    await ok(['get', '', '--from-key', '--rev', String(head - 2)]); // the compacted revision itself
    await ok(['get', '', '--from-key', '--rev', String(head - 1), '-w', 'json']);
    const compacted = await same(['get', 'a', '--rev', String(head - 3)]);
    assert.equal(compacted.kvs.exitCode, 1);
    assert.equal(lastError(compacted.kvs), 'Error: etcdserver: mvcc: required revision has been compacted');
    assert.match(compacted.kvs.stderr, /code = OutOfRange desc = etcdserver: mvcc: required revision has been compacted/);

    const again = await same(['compact', String(head - 2)]);
    assert.equal(again.kvs.exitCode, 1);
    assert.equal(lastError(again.kvs), 'Error: etcdserver: mvcc: required revision has been compacted');
    const ahead = await same(['compact', String(head + 100)]);
    assert.equal(ahead.kvs.exitCode, 1);
    assert.equal(lastError(ahead.kvs), 'Error: etcdserver: mvcc: required revision is a future revision');
    assert.equal((await ok(['compact', String(head), '--physical'])).stdout, `compacted revision ${head}\n`);
    await ok(['get', '', '--from-key', '-w', 'json']);
  });

  await t.test('errors: future revision, empty key', async () => {
    const future = await same(['get', 'a', '--rev', '100000']);
    assert.equal(future.kvs.exitCode, 1);
    assert.equal(lastError(future.kvs), 'Error: etcdserver: mvcc: required revision is a future revision');
    assert.match(future.kvs.stderr, /code = OutOfRange/);

    for (const args of [['get', ''], ['put', '', 'v'], ['del', ''], ['get', '', '-w', 'json']]) {
      const r = await same(args);
      assert.equal(r.kvs.exitCode, 1, args.join(' '));
      assert.equal(lastError(r.kvs), 'Error: etcdserver: key is not provided');
      assert.match(r.kvs.stderr, /code = InvalidArgument/);
    }
    const emptyInTxn = await same(['txn'], { input: 'value("") = "x"\n\nput k v\n\n\n' });
    assert.equal(emptyInTxn.kvs.exitCode, 1);
    assert.equal(lastError(emptyInTxn.kvs), 'Error: etcdserver: key is not provided');
    // Nothing above changed the store.
    await ok(['get', '', '--from-key', '-w', 'json']);
  });

  await t.test('lease grant, put --lease, keep-alive --once, timetolive --keys, list, revoke', async () => {
    // etcdctl 3.4 cannot choose a lease id: each server picks its own, and the outputs are
    // compared with it (hex in text, decimal in JSON) replaced; the remaining TTL depends on
    // the clock and etcd lists attached keys in map order, so those are normalised too.
    const ids = { kvs: '', etcd: '' };
    const remaining: number[] = [];
    const mask = (r: CmdResult, id: string): CmdResult => {
      const dec = id ? BigInt(`0x${id}`).toString() : '';
      const f = (text: string) =>
        text
          .split('\n')
          .map((line) => {
            if (id) line = line.split(id).join('<lease>');
            if (dec && line.startsWith('{')) line = line.split(dec).join('"<lease>"');
            const m = /remaining\((-?\d+)s\)/.exec(line);
            if (m) remaining.push(Number(m[1]));
            return line
              .replace(/remaining\(-?\d+s\)/, 'remaining(<n>s)')
              .replace(/keys\(\[(.*)\]\)/, (_, ks: string) => `keys([${ks.split(' ').sort().join(' ')}])`);
          })
          .join('\n');
      return { ...r, stdout: f(r.stdout), stderr: f(r.stderr) };
    };
    const withLease = async (args: (id: string) => string[]) => {
      const [k, e] = await Promise.all([etcdctl(kvs.endpoint, args(ids.kvs)), etcdctl(etcd.endpoint, args(ids.etcd))]);
      const label = args('<lease>').join(' ');
      assert.deepEqual(normalise(mask(k, ids.kvs), kvs.endpoint), normalise(mask(e, ids.etcd), etcd.endpoint), `etcdctl ${label}\n--- kvs:\n${k.stdout}${k.stderr}\n--- etcd:\n${e.stdout}${e.stderr}`);
      return k;
    };
    const [k, e] = await Promise.all([etcdctl(kvs.endpoint, ['lease', 'grant', '100']), etcdctl(etcd.endpoint, ['lease', 'grant', '100'])]);
    const granted = /^lease ([0-9a-f]{16}) granted with TTL\(100s\)\n$/;
    ids.kvs = granted.exec(k.stdout)?.[1] ?? assert.fail(`kvs: ${k.stdout}${k.stderr}`);
    ids.etcd = granted.exec(e.stdout)?.[1] ?? assert.fail(`etcd: ${e.stdout}${e.stderr}`);

    assert.equal((await withLease((id) => ['put', `--lease=${id}`, 'leased/a', '1'])).stdout, 'OK\n');
    await withLease((id) => ['put', `--lease=${id}`, 'leased/b', '2']);
    await withLease(() => ['get', 'leased/', '--prefix', '-w', 'json']);
    assert.equal((await withLease((id) => ['lease', 'keep-alive', '--once', id])).stdout, `lease ${ids.kvs} keepalived with TTL(100)\n`);
    const ttl = await withLease((id) => ['lease', 'timetolive', '--keys', id]);
    assert.match(ttl.stdout, /granted with TTL\(100s\), remaining\(\d+s\), attached keys\(\[leased\/[ab] leased\/[ab]\]\)/);
    await withLease((id) => ['lease', 'timetolive', id]);
    assert.ok(remaining.every((n) => n >= 90 && n <= 100), `remaining TTLs ${remaining}`);
    assert.equal((await withLease(() => ['lease', 'list'])).stdout, `found 1 leases\n${ids.kvs}\n`);
    assert.equal((await withLease((id) => ['lease', 'revoke', id])).stdout, `lease ${ids.kvs} revoked\n`);
    await withLease(() => ['get', 'leased/', '--prefix', '-w', 'json']);
    assert.equal((await withLease((id) => ['lease', 'timetolive', id])).stdout, `lease ${ids.kvs} already expired\n`);
    for (const args of [(id: string) => ['lease', 'revoke', id], (id: string) => ['lease', 'keep-alive', '--once', id], () => ['put', '--lease=1234', 'k', 'v']]) {
      const r = await withLease(args);
      assert.notEqual(r.exitCode, 0);
      assert.match(lastError(r), /etcdserver: requested lease not found/);
    }
    const tooLarge = await same(['lease', 'grant', '9000000001']);
    assert.equal(lastError(tooLarge.kvs), 'Error: failed to grant lease (etcdserver: too large lease TTL)');
    await withLease(() => ['lease', 'list']);
  });

  await t.test('endpoint status, endpoint health, member list, alarm list', async () => {
    await ok(['endpoint', 'status', '-w', 'json']);
    await ok(['endpoint', 'health']);
    await ok(['endpoint', 'health', '-w', 'json']);
    await ok(['member', 'list', '-w', 'json']);
    await ok(['alarm', 'list']);

    // The simple and table formats: same shape, only the per-server fields differ.
    const fields = (line: string) => line.split(', ');
    const [ks, es] = await Promise.all([etcdctl(kvs.endpoint, ['endpoint', 'status']), etcdctl(etcd.endpoint, ['endpoint', 'status'])]);
    assert.equal(ks.exitCode, 0, ks.stderr);
    const k = fields(ks.stdout.replace(/\n$/, ''));
    const e = fields(es.stdout.replace(/\n$/, ''));
    assert.equal(k.length, e.length);
    // endpoint, id, version, db size, is leader, is learner, raft term, raft index, applied index, errors
    assert.equal(k[0], kvs.endpoint);
    assert.match(k[1]!, /^[0-9a-f]{1,16}$/);
    assert.match(k[2]!, /^3\.4\.\d+/);
    assert.match(k[3]!, /^\d+ [kMG]?B$/);
    assert.deepEqual([k[4], k[5], k[9]], [e[4], e[5], e[9]]);
    assert.equal(k[7], k[8], 'raft index = raft applied index on an idle single node');

    const [km, em] = await Promise.all([etcdctl(kvs.endpoint, ['member', 'list']), etcdctl(etcd.endpoint, ['member', 'list'])]);
    assert.equal(km.exitCode, 0, km.stderr);
    const m = fields(km.stdout.replace(/\n$/, ''));
    const n = fields(em.stdout.replace(/\n$/, ''));
    // id, status, name, peer addrs, client addrs, is learner
    assert.equal(m[0], k[1], 'member list and endpoint status name the same member');
    assert.deepEqual([m[1], m[4], m[5]], [n[1], `http://${kvs.endpoint}`, n[5]]);
    assert.deepEqual([m[1], n[4]], ['started', `http://${etcd.endpoint}`]);

    const json = parseJson((await etcdctl(kvs.endpoint, ['endpoint', 'status', '-w', 'json'])).stdout) as {
      Status: { header: { member_id: string; revision: number }; leader: string; raftIndex: number; raftAppliedIndex: number };
    }[];
    assert.equal(json[0]!.Status.leader, json[0]!.Status.header.member_id, 'a single node leads itself');
    assert.equal(BigInt(json[0]!.Status.leader).toString(16), k[1]);

    const table = await etcdctl(kvs.endpoint, ['endpoint', 'status', '-w', 'table']);
    assert.equal(table.exitCode, 0, table.stderr);
    assert.match(table.stdout, /\| +ENDPOINT +\| +ID +\| +VERSION +\|/);
    assert.ok(table.stdout.includes(`| ${kvs.endpoint} | ${k[1]} |`), table.stdout);
  });

  await t.test('watch: a key, --prefix, --rev, --prev-kv, -w json, interactive', async () => {
    // Every watch starts at the next revision (--rev), so it sees the same events on both
    // servers however long etcdctl takes to connect.
    const seed = parseJson((await ok(['put', 'watch/seed', '0', '-w', 'json'])).stdout) as { header: { revision: number } };
    const from = `--rev=${Number(seed.header.revision) + 1}`;
    const watches = [
      ['watch', 'watch/a', from],
      ['watch', 'watch/', '--prefix', from],
      ['watch', 'watch/', '--prefix', '--prev-kv', from],
      ['watch', 'watch/a', '-w', 'json', from],
      ['watch', `--rev=${Number(seed.header.revision) - 1}`, 'watch/seed'],
      ['watch', '-i'],
    ];
    const start = (endpoint: string) => Promise.all(watches.map((args) => startEtcdctl(t, endpoint, args)));
    const [onKvs, onEtcd] = await Promise.all([start(kvs.endpoint), start(etcd.endpoint)]);
    for (const p of [onKvs.at(-1)!, onEtcd.at(-1)!]) p.write(`watch ${from} watch/b\nwatch ${from} --prefix watch/\n`);

    await ok(['put', 'watch/a', '1']);
    await ok(['put', 'watch/b', '2']);
    await ok(['put', 'watch/a', '3']);
    await ok(['del', 'watch/', '--prefix']);
    await ok(['txn'], { input: '\nput watch/a 4\nput watch/c 5\n\n\n' });
    await ok(['put', 'watch/end', 'x']);

    const lastLines = ['watch/a\n4\n', 'watch/end\nx\n', 'watch/end\nx\n', '"value":"NA=="', 'watch/seed\n0\n', 'watch/end\nx\n'];
    /**
     * `watch -i` prints each watch's events from a goroutine of its own, one line (type, key,
     * value) per Println: two watches that get the same event at once interleave their lines
     * (seen in CI: "PUT PUT watch/b 2 watch/b 2"), whichever server sent it. So the lines are
     * compared as a multiset.
     */
    const lineSet = (out: string) => out.split('\n').sort();
    /**
     * A watch response's header revision is the store's revision when the server sent it: a
     * server that sends an event later (etcd under load batches them) reports a later one. It
     * must cover the response's events; beyond that the two servers may differ.
     */
    const headerRevisions = (lines: unknown[]) =>
      lines.map((l) => {
        const r = l as { Header?: { revision: number }; Events?: { kv: { mod_revision: number } }[] };
        if (!r?.Header || !r.Events?.length) return l;
        const last = Math.max(...r.Events.map((e) => e.kv.mod_revision));
        assert.ok(r.Header.revision >= last, `a watch response's header revision ${r.Header.revision} is below its events' ${last}`);
        return { ...r, Header: { ...r.Header, revision: '<at least the events\' revision>' } };
      });
    const both = async (i: number) => {
      await Promise.all([onKvs[i]!.until((s) => s.includes(lastLines[i]!)), onEtcd[i]!.until((s) => s.includes(lastLines[i]!))]);
      const [k, e] = await Promise.all([onKvs[i]!.stop(), onEtcd[i]!.stop()]);
      const interactive = watches[i]!.includes('-i');
      const view = (out: string, endpoint: string) => (interactive ? lineSet(out) : headerRevisions(normaliseText(out, endpoint)));
      assert.deepEqual(view(k.stdout, kvs.endpoint), view(e.stdout, etcd.endpoint), `etcdctl ${watches[i]!.join(' ')}\n--- kvs:\n${k.stdout}\n--- etcd:\n${e.stdout}`);
      return k.stdout;
    };
    assert.equal(await both(0), 'PUT\nwatch/a\n1\nPUT\nwatch/a\n3\nDELETE\nwatch/a\n\nPUT\nwatch/a\n4\n');
    for (let i = 1; i < watches.length; i++) await both(i);
  });
});
