// Watch against etcd 3.4: the same Watch streams and the same writes on both servers, and the
// responses compared per watcher (created, events, cancel, progress), field by field but for
// the header's cluster id, member id and raft term. The stores stay in lockstep, so revisions
// line up; each case uses its own key prefix. Where a response must NOT come, a later one that
// must (etcd sends a stream's responses in request and revision order) proves it did not.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freshPrefixes, prefixEnd, rev, startPair, type Differ, type Plain } from './differential.js';

const NOPUT = 'NOPUT';
const NODELETE = 'NODELETE';
const DELETE = 1;
/** {0: n, 1: n, ...} for ids 0..k-1. */
const each = (k: number, n = 1) => Object.fromEntries(Array.from({ length: k }, (_, i) => [i, n]));

test('kvs answers Watch as etcd 3.4 does', { timeout: 240_000 }, async (t) => {
  const d: Differ = await startPair(t);
  const fresh = freshPrefixes();

  await t.test('a key, a prefix, a range, from a key', async () => {
    const p = fresh('kinds');
    const w = d.watch(t);
    w.send({ createRequest: { key: `${p}a` } });
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p) } });
    w.send({ createRequest: { key: `${p}b`, rangeEnd: `${p}d` } });
    w.send({ createRequest: { key: `${p}c`, rangeEnd: '\0' } });
    await w.expect(each(4), 'created');
    await d.put({ key: `${p}a`, value: '1' });
    await d.put({ key: `${p}b`, value: '2' });
    await d.put({ key: `${p}c`, value: '3' });
    await d.put({ key: `${p}d`, value: '4' });
    await d.del({ key: `${p}a` });
    const got = await w.expect({ 0: 2, 1: 5, 2: 2, 3: 2 }, 'events');
    assert.equal(got['0']![1].events[0].type, DELETE);
    // Stop the from-key watcher: it would see every later case's keys.
    w.send({ cancelRequest: { watchId: 3 } });
    await w.expect({ 3: 1 }, 'cancel');
    w.nothingElse();
  });

  await t.test('one response per revision, with all its events', async () => {
    const p = fresh('txn');
    const w = d.watch(t);
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p) } });
    w.send({ createRequest: { key: `${p}b` } });
    await w.expect(each(2));
    await d.txn({ success: ['a', 'b', 'c'].map((k) => ({ requestPut: { key: p + k, value: k } })) });
    await d.del({ key: p, rangeEnd: prefixEnd(p) });
    const got = await w.expect(each(2, 2));
    assert.equal(got['0']![0].events.length, 3);
    assert.equal(got['0']![1].events.length, 3);
    w.nothingElse();
  });

  await t.test('many watchers on one stream', async () => {
    const p = fresh('many');
    const w = d.watch(t);
    const keys = ['a', 'b', 'c', 'd', 'e'];
    const counts: Record<number, number> = {};
    keys.forEach((k, i) => {
      w.send({ createRequest: { key: p + k } });
      w.send({ createRequest: { key: p + k, rangeEnd: prefixEnd(p + k) } });
      w.send({ createRequest: { key: p, rangeEnd: `${p}${k}\0` } });
      counts[3 * i] = 1; // the key
      counts[3 * i + 1] = k === 'a' ? 2 : 1; // the prefix (a also covers aa)
      counts[3 * i + 2] = i + 1 + (k === 'a' ? 0 : 1); // [p, k\0): a..k, and aa from b on
    });
    await w.expect(each(15), 'created');
    for (const k of keys) await d.put({ key: p + k, value: k });
    await d.put({ key: `${p}aa`, value: 'x' });
    await w.expect(counts, 'events');
    w.nothingElse();
  });

  await t.test('from a past revision: history, then live, no gap, no duplicate', async () => {
    const p = fresh('past');
    const first = rev(await d.put({ key: `${p}a`, value: '1' }));
    await d.put({ key: `${p}b`, value: '2' });
    await d.txn({ success: [{ requestPut: { key: `${p}a`, value: '3' } }, { requestDeleteRange: { key: `${p}b` } }] });
    await d.put({ key: `${p}c`, value: '4' });
    const w = d.watch(t);
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), startRevision: first } });
    w.send({ createRequest: { key: `${p}a`, startRevision: first + 1 } });
    w.send({ createRequest: { key: `${p}b`, startRevision: first, prevKv: true } });
    const history = await w.expect(each(3, 2), 'created, then the history in one response');
    assert.equal(history['0']![1].events.length, 5);
    await d.put({ key: `${p}a`, value: '5' });
    await d.put({ key: `${p}b`, value: '6' });
    await w.expect({ 0: 2, 1: 1, 2: 1 }, 'live');
    // A start revision in the future waits for it.
    w.send({ createRequest: { key: `${p}a`, startRevision: d.revision + 2 } });
    await w.expect({ 3: 1 }, 'created');
    await d.put({ key: `${p}a`, value: '7' });
    await d.put({ key: `${p}a`, value: '8' });
    await w.expect({ 0: 2, 1: 2, 3: 1 }, 'live after the future start');
    w.nothingElse();
  });

  await t.test('prev_kv', async () => {
    const p = fresh('prev');
    await d.put({ key: `${p}a`, value: 'old' });
    const w = d.watch(t);
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), prevKv: true } });
    await w.expect({ 0: 1 });
    await d.put({ key: `${p}a`, value: 'new' });
    await d.put({ key: `${p}b`, value: 'first' });
    await d.del({ key: p, rangeEnd: prefixEnd(p) });
    await d.put({ key: `${p}a`, value: 'again' });
    const got = await w.expect({ 0: 4 });
    assert.equal(got['0']![0].events[0].prevKv.value, 'old');
    w.nothingElse();
  });

  await t.test('filters: NOPUT, NODELETE', async () => {
    const p = fresh('filter');
    const w = d.watch(t);
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), filters: [NOPUT] } });
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), filters: [NODELETE] } });
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), filters: [NOPUT, NODELETE] } });
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), filters: [NODELETE], prevKv: true } });
    await w.expect(each(4));
    await d.put({ key: `${p}a`, value: '1' });
    await d.put({ key: `${p}a`, value: '2' });
    await d.txn({ success: [{ requestPut: { key: `${p}b`, value: '3' } }, { requestDeleteRange: { key: `${p}a` } }] });
    await d.del({ key: `${p}b` });
    // NOPUT: the txn's delete, then b's; NODELETE: three puts; both: nothing, ever.
    await w.expect({ 0: 2, 1: 3, 3: 3 });
    w.nothingElse('a watcher filtering everything gets no responses');
  });

  await t.test('watch ids: chosen, automatic, duplicate; cancel', async () => {
    const p = fresh('ids');
    const w = d.watch(t);
    w.send({ createRequest: { key: `${p}a`, watchId: 1 } });
    w.send({ createRequest: { key: `${p}a` } }); // auto: 0
    w.send({ createRequest: { key: `${p}a` } }); // auto: 2, as 1 is taken
    w.send({ createRequest: { key: `${p}a`, watchId: 2 } }); // duplicate
    w.send({ createRequest: { key: `${p}a`, watchId: 100 } });
    w.send({ createRequest: { key: `${p}a`, watchId: -7 } });
    w.send({ createRequest: { key: `${p}a` } }); // auto: 3
    await w.expect({ 0: 1, 1: 1, 2: 1, '-1': 1, 100: 1, '-7': 1, 3: 1 }, 'created');
    w.send({ cancelRequest: { watchId: 100 } });
    w.send({ cancelRequest: { watchId: 100 } }); // gone now: no answer
    w.send({ cancelRequest: { watchId: 55 } }); // never existed: no answer
    w.send({ progressRequest: {} });
    await w.expect({ 100: 1, '-1': 1 }, 'one cancel, then the progress response');
    w.nothingElse('cancelling an unknown id answers nothing');
    await d.put({ key: `${p}a`, value: 'x' });
    await w.expect({ 0: 1, 1: 1, 2: 1, '-7': 1, 3: 1 }, 'events to the five left');
    w.send({ createRequest: { key: `${p}a`, watchId: 100 } });
    await w.expect({ 100: 1 }, 'an id is free again after its cancel');
    w.nothingElse();
  });

  await t.test('empty and inverted ranges; an empty key', async () => {
    const p = fresh('empty');
    const w = d.watch(t);
    w.send({ createRequest: { key: `${p}b`, rangeEnd: `${p}b` } });
    w.send({ createRequest: { key: `${p}c`, rangeEnd: `${p}b` } });
    w.send({ createRequest: { key: `${p}c`, rangeEnd: `${p}b`, watchId: 9 } });
    w.send({ createRequest: { key: '' } });
    await w.expect({ '-1': 3, 0: 1 });
    w.nothingElse();
  });

  await t.test('progress requests', async () => {
    const p = fresh('progress');
    const w = d.watch(t);
    w.send({ progressRequest: {} });
    await w.expect({ '-1': 1 }, 'progress on an empty stream');
    w.send({ createRequest: { key: `${p}a` } });
    await w.expect({ 0: 1 });
    await d.put({ key: `${p}a`, value: '1' });
    await w.expect({ 0: 1 });
    await d.put({ key: `${p}other`, value: '1' });
    w.send({ progressRequest: {} });
    const got = await w.expect({ '-1': 1 }, 'progress');
    assert.equal(rev(got['-1']![0]), d.revision);
    w.nothingElse();
  });

  await t.test('fragments', async () => {
    const p = fresh('frag');
    const big = 'x'.repeat(700 * 1024);
    const first = rev(await d.put({ key: `${p}a`, value: big }));
    await d.put({ key: `${p}b`, value: big });
    await d.put({ key: `${p}c`, value: big });
    const w = d.watch(t);
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), startRevision: first, fragment: true } });
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), startRevision: first, fragment: true, prevKv: true } });
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), startRevision: first + 1, fragment: true } });
    const got = await w.expect({ 0: 3, 1: 3, 2: 2 }, 'created, then two fragments (under 1.5 MiB: one)');
    assert.deepEqual(got['0']!.map((r) => r.fragment), [false, true, false]);
    w.nothingElse();
  });

  await t.test('a lease revoke: its keys deleted in one revision', async () => {
    const p = fresh('lease');
    const id = 7001;
    await d.ok('LeaseGrant', { ID: id, TTL: 60 });
    await d.put({ key: `${p}a`, value: '1', lease: id });
    await d.put({ key: `${p}b`, value: '2', lease: id });
    const w = d.watch(t);
    w.send({ createRequest: { key: p, rangeEnd: prefixEnd(p), prevKv: true } });
    await w.expect({ 0: 1 });
    await d.ok('LeaseRevoke', { ID: id });
    const got = await w.expect({ 0: 1 }, 'one response, two deletes');
    assert.equal(got['0']![0].events.length, 2);
    w.nothingElse();
  });

  await t.test('compaction: a start revision below it is cancelled', async () => {
    const p = fresh('compact');
    const first = rev(await d.put({ key: `${p}a`, value: '1' }));
    await d.put({ key: `${p}a`, value: '2' });
    await d.del({ key: `${p}a` });
    const last = rev(await d.put({ key: `${p}a`, value: '3' }));
    await d.compact({ revision: last - 1 });
    const w = d.watch(t);
    w.send({ createRequest: { key: `${p}a`, startRevision: first } });
    const got = await w.expect({ 0: 2 }, 'created, then cancelled with the compact revision');
    assert.equal(got['0']![1].compactRevision, String(last - 1));
    w.send({ createRequest: { key: `${p}a`, startRevision: last - 2 } });
    await w.expect({ 1: 2 }, 'one below the compact revision');
    w.send({ createRequest: { key: `${p}a`, startRevision: last - 1 } });
    await w.expect({ 2: 2 }, 'at the compact revision: served from what is left');
    w.send({ createRequest: { key: `${p}a`, startRevision: -3 } });
    await w.expect({ 3: 2 }, 'a negative start revision');
    w.nothingElse();
  });
});

test('progress_notify: idle watchers that asked get the revision periodically, as from etcd 3.4', { timeout: 120_000 }, async (t) => {
  const d = await startPair(t, {
    etcd: ['--experimental-watch-progress-notify-interval=300ms'],
    kvs: ['--watch-progress-notify-interval=300ms'],
  });
  const p = 'notify/';
  const w = d.watch(t);
  w.send({ createRequest: { key: `${p}a`, progressNotify: true } });
  w.send({ createRequest: { key: `${p}b`, progressNotify: true } });
  w.send({ createRequest: { key: `${p}c` } });
  await w.expect({ 0: 1, 1: 1, 2: 1 }, 'created');
  const first = await w.expect({ 0: 1, 1: 1 }, 'a progress notification each: no events, the current revision');
  assert.equal(first['0']![0].events.length, 0);
  assert.equal(rev(first['0']![0]), d.revision);
  const before = d.revision;
  await d.txn({ success: [{ requestPut: { key: `${p}a`, value: '1' } }, { requestPut: { key: `${p}c`, value: '1' } }] });
  // a: notifications of the old revision may still come (ticks before the write), then the
  // event, then, a tick without events later, a notification at the new revision.
  const after = async (q: typeof w.etcd) => {
    const seen: Plain[] = [];
    for (;;) {
      const [r] = (await q.take({ 0: 1 }))['0']!;
      seen.push(r);
      if (r.events.length) break;
      assert.equal(rev(r), before, `${q.name}: a notification before the event has the old revision`);
    }
    const [last] = (await q.take({ 0: 1 }))['0']!;
    return [seen.at(-1), last];
  };
  const [fromEtcd, fromKvs] = await Promise.all([after(w.etcd), after(w.kvs)]);
  assert.deepEqual(fromKvs, fromEtcd);
  assert.equal(rev(fromEtcd[1]), d.revision);
  assert.equal(fromEtcd[1].events.length, 0);
  await w.expect({ 2: 1 }, 'the watcher without progress_notify: the event only');
});
