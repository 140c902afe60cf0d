// The etcd3 npm client against kvs, as an application would use it: plain KV calls,
// if/then/else transactions, software transactional memory under contention, compaction
// through the raw KV API, and the client's typed errors. Every test runs against a real
// etcd too, so each expectation is checked to be etcd's behaviour, not only kvs's.

import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import {
  Etcd3,
  GRPCInvalidArgumentError,
  GRPCOutOfRangeError,
  EtcdLeaseInvalidError,
  STMConflictError,
  Isolation,
} from 'etcd3';
import { client, startEtcd, startKvs } from '../testkit/harness.js';

type Backend = 'kvs' | 'etcd';

async function start(t: TestContext, backend: Backend): Promise<Etcd3> {
  const node = backend === 'kvs' ? await startKvs(t) : await startEtcd(t);
  return client(t, node.endpoint);
}

/** The header revision of a fresh read: the store's current revision. */
async function currentRevision(c: Etcd3): Promise<number> {
  const res = await c.get('\0no-such-key').exec();
  return Number(res.header.revision);
}

/** Runs `fn` and returns the error it rejects with (fails if it resolves). */
async function failure(fn: () => Promise<unknown>): Promise<Error> {
  try {
    await fn();
  } catch (err) {
    return err as Error;
  }
  assert.fail('expected the call to fail');
}

for (const backend of ['kvs', 'etcd'] as const) {
  test(`etcd3 client against ${backend}`, async (t) => {
    const c = await start(t, backend);

    await t.test('many large getAll()s in flight at once: each answer whole, and its own', async () => {
      // 400 keys of 2 KiB in 8 groups; each value is its key repeated, so a response holding
      // another's bytes cannot pass. 48 Ranges of 100-800 KiB at once on one connection are
      // more than the socket and HTTP/2's windows hold: most wait to be written.
      const key = (g: number, i: number) => `big/${g}/${String(i).padStart(3, '0')}`;
      const value = (k: string) => k.repeat(Math.ceil(2048 / k.length)).slice(0, 2048);
      for (let g = 0; g < 8; g++) {
        await Promise.all(Array.from({ length: 50 }, (_, i) => c.put(key(g, i)).value(value(key(g, i)))));
      }
      const reads = Array.from({ length: 48 }, (_, n) => {
        const prefix = n % 3 === 0 ? 'big/' : `big/${n % 8}/`;
        return c.getAll().prefix(prefix).strings().then((kvs) => ({ prefix, kvs }));
      });
      for (const { prefix, kvs } of await Promise.all(reads)) {
        const keys = Object.keys(kvs);
        assert.equal(keys.length, prefix === 'big/' ? 400 : 50, prefix);
        for (const k of keys) {
          assert.ok(k.startsWith(prefix), `${k} in a Range of ${prefix}`);
          assert.equal(kvs[k], value(k), k);
        }
      }
      await c.delete().prefix('big/');
    });

    await t.test('put, get, getAll().prefix(), delete', async () => {
      const put = await c.put('fruit/apple').value('red');
      const rev0 = Number(put.header.revision);
      assert.ok(rev0 >= 2, `first put revision ${rev0}`);
      await c.put('fruit/banana').value('yellow');
      await c.put('fruit/cherry').value(Buffer.from([0, 1, 2, 255]));
      await c.put('vegetable/kale').value('green');
      await c.put('fruit/apple').value('green');

      assert.equal(await c.get('fruit/apple').string(), 'green');
      assert.deepEqual(await c.get('fruit/cherry').buffer(), Buffer.from([0, 1, 2, 255]));
      assert.equal(await c.get('fruit/durian').string(), null);
      assert.equal(await c.get('fruit/banana').exists(), true);
      assert.equal(await c.get('fruit/durian').exists(), false);
      // Reading an older revision.
      assert.equal(await c.get('fruit/apple').revision(rev0).string(), 'red');

      const apple = (await c.get('fruit/apple').exec()).kvs[0]!;
      assert.equal(Number(apple.create_revision), rev0);
      assert.equal(Number(apple.mod_revision), rev0 + 4);
      assert.equal(apple.version, '2');

      assert.deepEqual(await c.getAll().prefix('fruit/').keys(), ['fruit/apple', 'fruit/banana', 'fruit/cherry']);
      assert.deepEqual(await c.getAll().prefix('fruit/').limit(2).keys(), ['fruit/apple', 'fruit/banana']);
      assert.deepEqual(await c.getAll().prefix('fruit/').sort('Mod', 'Descend').keys(), [
        'fruit/apple',
        'fruit/cherry',
        'fruit/banana',
      ]);
      assert.deepEqual(await c.getAll().prefix('fruit/').sort('Value', 'Ascend').keys(), [
        'fruit/cherry', // \x00\x01\x02\xff sorts first
        'fruit/apple',
        'fruit/banana',
      ]);
      assert.equal(await c.getAll().prefix('fruit/').count(), 3);
      assert.equal(await c.getAll().prefix('nothing/').count(), 0);
      const all = await c.getAll().prefix('fruit/').strings();
      assert.deepEqual(Object.keys(all).sort(), ['fruit/apple', 'fruit/banana', 'fruit/cherry']);
      assert.equal(all['fruit/banana'], 'yellow');
      // Past revision of a range: before the second apple put, before cherry.
      assert.deepEqual(await c.getAll().prefix('fruit/').revision(rev0 + 1).strings(), {
        'fruit/apple': 'red',
        'fruit/banana': 'yellow',
      });

      const del = await c.delete().key('fruit/banana').exec();
      assert.equal(del.deleted, '1');
      assert.equal(await c.get('fruit/banana').string(), null);
      const prev = await c.delete().prefix('fruit/').getPrevious();
      assert.deepEqual(prev.map((kv) => kv.key.toString()).sort(), ['fruit/apple', 'fruit/cherry']);
      assert.equal(await c.getAll().prefix('fruit/').count(), 0);
      assert.equal(await c.get('vegetable/kale').string(), 'green');
      const none = await c.delete().key('fruit/none').exec();
      assert.equal(none.deleted, '0');
      // A delete that removes nothing does not move the revision.
      assert.equal(Number(none.header.revision), await currentRevision(c));
    });

    await t.test('if(...).then(...).else(...).commit()', async () => {
      await c.put('txn/a').value('1');
      const before = await currentRevision(c);

      const ok = await c
        .if('txn/a', 'Value', '==', '1')
        .and('txn/b', 'Version', '==', 0)
        .then(c.put('txn/a').value('2'), c.put('txn/b').value('created'), c.get('txn/a'))
        .else(c.get('txn/a'))
        .commit();
      assert.equal(ok.succeeded, true);
      assert.equal(Number(ok.header.revision), before + 1, 'one revision for the whole txn');
      assert.equal(ok.responses.length, 3);
      // The range inside the txn sees the txn's own earlier put.
      assert.equal(ok.responses[2]!.response_range!.kvs[0]!.value.toString(), '2');
      assert.equal(await c.get('txn/b').string(), 'created');

      const no = await c
        .if('txn/a', 'Value', '==', '1')
        .then(c.put('txn/a').value('never'))
        .else(c.get('txn/a'), c.delete().key('txn/b'))
        .commit();
      assert.equal(no.succeeded, false);
      assert.equal(no.responses[0]!.response_range!.kvs[0]!.value.toString(), '2');
      assert.equal(no.responses[1]!.response_delete_range!.deleted, '1');
      assert.equal(await c.get('txn/a').string(), '2');
      assert.equal(await c.get('txn/b').string(), null);

      // Compare on mod revision and create revision; a read-only txn does not move the revision.
      const a = (await c.get('txn/a').exec()).kvs[0]!;
      const rev = await currentRevision(c);
      const ro = await c
        .if('txn/a', 'Mod', '==', Number(a.mod_revision))
        .and('txn/a', 'Create', '<', Number(a.mod_revision))
        .then(c.get('txn/a'))
        .commit();
      assert.equal(ro.succeeded, true);
      assert.equal(Number(ro.header.revision), rev);

      // Putting the same key twice in one txn is refused as etcd refuses it.
      const dup = await failure(() => c.if('txn/a', 'Version', '>', 0).then(c.put('txn/x').value('1'), c.put('txn/x').value('2')).commit());
      assert.ok(dup instanceof GRPCInvalidArgumentError, `${dup.constructor.name}: ${dup.message}`);
      assert.match(dup.message, /etcdserver: duplicate key given in txn request/);
    });

    await t.test('stm(): concurrent increments of one counter lose nothing', async () => {
      const contenders = 6;
      const increments = 8;
      let attempts = 0;
      await c.put('stm/counter').value('0');
      const worker = async () => {
        for (let i = 0; i < increments; i++) {
          await c.stm({ retries: 1000 }).transact(async (tx) => {
            attempts++;
            const v = Number(await tx.get('stm/counter').string());
            await tx.put('stm/counter').value(String(v + 1));
          });
        }
      };
      await Promise.all(Array.from({ length: contenders }, worker));
      assert.equal(await c.get('stm/counter').number(), contenders * increments);
      const kv = (await c.get('stm/counter').exec()).kvs[0]!;
      assert.equal(Number(kv.version), contenders * increments + 1, 'exactly one write per committed increment');
      t.diagnostic(`${backend}: ${attempts} stm attempts for ${contenders * increments} increments`);

      // The other isolation levels that check reads: RepeatableReads and Serializable.
      for (const isolation of [Isolation.RepeatableReads, Isolation.Serializable]) {
        await c.put('stm/pair-a').value('0');
        await c.put('stm/pair-b').value('0');
        const move = () =>
          c.stm({ retries: 1000, isolation }).transact(async (tx) => {
            const [x, y] = await Promise.all([tx.get('stm/pair-a').number(), tx.get('stm/pair-b').number()]);
            await tx.put('stm/pair-a').value(String(x! + 1));
            await tx.put('stm/pair-b').value(String(y! - 1));
          });
        await Promise.all(Array.from({ length: 12 }, move));
        assert.equal(await c.get('stm/pair-a').number(), 12);
        assert.equal(await c.get('stm/pair-b').number(), -12);
      }

      // With no retries left, a conflict surfaces as STMConflictError.
      await c.put('stm/conflict').value('0');
      const err = await failure(() =>
        c.stm({ retries: 0 }).transact(async (tx) => {
          const v = Number(await tx.get('stm/conflict').string());
          await c.put('stm/conflict').value('changed behind its back');
          await tx.put('stm/conflict').value(String(v + 1));
        }),
      );
      assert.ok(err instanceof STMConflictError, `${err.constructor.name}: ${err.message}`);
      assert.equal(await c.get('stm/conflict').string(), 'changed behind its back');
    });

    await t.test('compaction through client.kv.compact, then typed errors on old revisions', async () => {
      const first = Number((await c.put('compact/k').value('v1')).header.revision);
      await c.put('compact/k').value('v2');
      const third = Number((await c.put('compact/k').value('v3')).header.revision);
      assert.equal(await c.get('compact/k').revision(first).string(), 'v1');

      const res = await c.kv.compact({ revision: third - 1, physical: true });
      assert.equal(Number(res.header.revision), third);

      const compacted = await failure(() => c.get('compact/k').revision(first).string());
      assert.ok(compacted instanceof GRPCOutOfRangeError, `${compacted.constructor.name}: ${compacted.message}`);
      assert.match(compacted.message, /etcdserver: mvcc: required revision has been compacted/);
      // Multi-key reads and a range inside a txn are refused the same way.
      await assert.rejects(c.getAll().prefix('compact/').revision(first).keys(), GRPCOutOfRangeError);
      await assert.rejects(
        c.if('compact/k', 'Version', '>', 0).then(c.get('compact/k').revision(first), c.put('compact/other').value('x')).commit(),
        (err: Error) => err instanceof GRPCOutOfRangeError && /required revision has been compacted/.test(err.message),
      );
      // The compacted revision itself is still readable; so is everything after it.
      assert.equal(await c.get('compact/k').revision(third - 1).string(), 'v2');
      assert.equal(await c.get('compact/k').string(), 'v3');

      // Compacting again at or below the compacted revision, or into the future.
      const again = await failure(() => c.kv.compact({ revision: third - 1 }));
      assert.ok(again instanceof GRPCOutOfRangeError);
      assert.match(again.message, /required revision has been compacted/);
      const future = await failure(() => c.kv.compact({ revision: third + 1000 }));
      assert.ok(future instanceof GRPCOutOfRangeError);
      assert.match(future.message, /required revision is a future revision/);
      const ahead = await failure(() => c.get('compact/k').revision(third + 1000).string());
      assert.ok(ahead instanceof GRPCOutOfRangeError);
      assert.match(ahead.message, /required revision is a future revision/);
    });

    await t.test('other typed errors', async () => {
      const empty = await failure(() => c.put('').value('v').exec());
      assert.ok(empty instanceof GRPCInvalidArgumentError, `${empty.constructor.name}: ${empty.message}`);
      assert.match(empty.message, /etcdserver: key is not provided/);

      // A lease that does not exist: the client maps etcd's message to its own error class.
      const lease = await failure(() => c.put('leased').value('v').lease('1234567').exec());
      assert.ok(lease instanceof EtcdLeaseInvalidError, `${lease.constructor.name}: ${lease.message}`);
      assert.equal(await c.get('leased').exists(), false);

      const ignore = await failure(() => c.put('never-written').ignoreLease().value('x').exec());
      assert.ok(ignore instanceof GRPCInvalidArgumentError, `${ignore.constructor.name}: ${ignore.message}`);
      const touch = await failure(() => c.put('never-written').touch());
      assert.ok(touch instanceof GRPCInvalidArgumentError, `${touch.constructor.name}: ${touch.message}`);
      assert.match(touch.message, /etcdserver: key not found/);

      // The client is still usable after errors.
      await c.put('after-errors').value('fine');
      assert.equal(await c.get('after-errors').string(), 'fine');
    });
  });
}
