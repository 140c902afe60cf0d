import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Compactor, type CompactorOptions } from './compactor.js';

/** A store whose revision the test moves, a clock, and the compactions asked for (answered at once). */
function harness(over: Partial<CompactorOptions> = {}) {
  const h = {
    clock: 1_000_000,
    revision: 1,
    compacted: 0,
    calls: [] as number[],
    fail: undefined as string | undefined,
    lines: [] as { level: number; msg: string; revision?: number }[],
    active: true,
  };
  const log = pino({ level: 'info' }, new Writable({ write(chunk, _enc, cb) { h.lines.push(JSON.parse(String(chunk))); cb(); } }));
  const opts: CompactorOptions = {
    log,
    now: () => h.clock,
    revision: () => h.revision,
    compactRevision: () => h.compacted,
    active: () => h.active,
    compact: (rev, done) => {
      h.calls.push(rev);
      if (h.fail) return done({ code: 11, message: h.fail });
      h.compacted = rev;
      done({ code: 0, message: '' });
    },
    ...over,
  };
  return { h, opts };
}

test('time mode: samples every interval and compacts to the newest sample at or before now - retention', () => {
  const { h, opts } = harness();
  const c = new Compactor({ mode: 'time', retentionMs: 10_000, sampleIntervalMs: 2_000 }, opts);
  // Samples: t=0 rev 1, t=2s rev 11, ..., one tick per sample interval; 10 puts between ticks.
  const tickAt = (ms: number) => {
    h.clock = 1_000_000 + ms;
    const r = c.tick();
    h.revision += 10;
    return r;
  };
  for (let ms = 0; ms < 10_000; ms += 2_000) assert.equal(tickAt(ms), undefined, `nothing is ${10_000 - ms} ms old at ${ms}`);
  assert.equal(tickAt(10_000), 1, 'at 10 s: the sample taken at 0 s');
  assert.equal(tickAt(12_000), 11, 'at 12 s: the sample of 2 s');
  assert.deepEqual(h.calls, [1, 11]);
  assert.ok(h.lines.some((l) => l.msg === 'auto compaction: compacted to revision 11' && l.revision === 11 && l.level === 30));

  // A late tick (the timer fired late): the newest sample old enough, not an older one.
  h.clock = 1_000_000 + 17_000;
  assert.equal(c.tick(), 31, 'at 17 s: the sample of 6 s (the newest at or before 7 s)');

  // No writes: the due sample is at or below the compact revision, nothing to do.
  const { h: idle, opts: idleOpts } = harness();
  const quiet = new Compactor({ mode: 'time', retentionMs: 1_000, sampleIntervalMs: 500 }, idleOpts);
  idle.revision = 5;
  for (let i = 0; i < 10; i++, idle.clock += 500) quiet.tick();
  assert.deepEqual(idle.calls, [5], 'compacted once to 5, then skipped');
});

test('revision mode: every interval to current - retain, skipped at or below the compact revision or below 1', () => {
  const { h, opts } = harness();
  const c = new Compactor({ mode: 'revision', retainRevisions: 100, intervalMs: 60_000 }, opts);
  assert.equal(c.intervalMs, 60_000);
  h.revision = 50;
  assert.equal(c.tick(), undefined, '50 - 100 < 1');
  h.revision = 100;
  assert.equal(c.tick(), undefined, 'revision 0 is not compacted');
  h.revision = 101;
  assert.equal(c.tick(), 1);
  assert.equal(c.tick(), undefined, 'no writes since: at the compact revision');
  h.revision = 1234;
  assert.equal(c.tick(), 1134);
  h.compacted = 1200; // a client compacted further meanwhile
  h.revision = 1250;
  assert.equal(c.tick(), undefined);
  assert.deepEqual(h.calls, [1, 1134]);
});

test('a failed compaction is logged, not fatal, and tried again at the next tick; only an active node compacts', () => {
  const { h, opts } = harness();
  const c = new Compactor({ mode: 'revision', retainRevisions: 5, intervalMs: 200 }, opts);
  h.revision = 20;
  h.fail = 'etcdserver: mvcc: required revision has been compacted';
  assert.equal(c.tick(), 15);
  const warn = h.lines.find((l) => l.level === 40);
  assert.match(warn!.msg, /auto compaction: compacting to revision 15 failed: etcdserver: mvcc: required revision has been compacted/);
  h.fail = undefined;
  assert.equal(c.tick(), 15, 'tried again');
  h.active = false;
  h.revision = 40;
  assert.equal(c.tick(), undefined, 'a follower does not compact');
  h.active = true;
  assert.equal(c.tick(), 35);
  assert.deepEqual(h.calls, [15, 15, 35]);
});

test('one compaction at a time: a tick while one is queued does nothing', () => {
  const pending: ((r: { code: number; message: string }) => void)[] = [];
  const { h, opts } = harness({ compact: (rev, done) => { h.calls.push(rev); pending.push(done); } });
  const c = new Compactor({ mode: 'revision', retainRevisions: 1, intervalMs: 100 }, opts);
  h.revision = 10;
  assert.equal(c.tick(), 9);
  h.revision = 20;
  assert.equal(c.tick(), undefined);
  pending[0]!({ code: 0, message: '' });
  h.compacted = 9;
  assert.equal(c.tick(), 19);
});

test('start() takes the first sample at once and ticks on a timer; stop() ends it', async () => {
  const { h, opts } = harness({ now: Date.now });
  const c = new Compactor({ mode: 'revision', retainRevisions: 2, intervalMs: 20 }, opts);
  h.revision = 10;
  c.start();
  assert.deepEqual(h.calls, [8], 'the first tick runs at start');
  h.revision = 30;
  const until = Date.now() + 5000;
  while (h.calls.length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
  c.stop();
  assert.deepEqual(h.calls, [8, 28]);
});
