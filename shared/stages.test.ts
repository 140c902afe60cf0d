import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Stage, StageTrace, STAGE_NAMES, microsFromPerformance, monotonicMicros, readStageFiles, startStages } from './stages.js';

const STAGES_URL = JSON.stringify(new URL('./stages.js', import.meta.url).href);

test('monotonicMicros reads CLOCK_MONOTONIC (process.hrtime) to within a few microseconds', () => {
  for (let i = 0; i < 1000; i++) {
    const a = Number(process.hrtime.bigint()) / 1000;
    const m = monotonicMicros();
    const b = Number(process.hrtime.bigint()) / 1000;
    assert.ok(m >= a - 5 && m <= b + 5, `hrtime ${a}..${b} µs, monotonicMicros ${m}`);
  }
  const p = performance.now();
  const m = monotonicMicros();
  assert.ok(m - microsFromPerformance(p) >= 0 && m - microsFromPerformance(p) < 1000);
});

test('stamps of another process fall between this process\'s stamps around it', () => {
  for (let i = 0; i < 3; i++) {
    const before = monotonicMicros();
    const child = Number(execFileSync(process.execPath, ['--input-type=module', '-e', `import { monotonicMicros } from ${STAGES_URL}; process.stdout.write(String(monotonicMicros()));`], { encoding: 'utf8' }));
    const after = monotonicMicros();
    assert.ok(before < child && child < after, `${before} < ${child} < ${after}`);
  }
});

test('StageTrace keeps every stamp (past its initial capacity), labels and links, and reads back', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvs-stages-'));
  try {
    const t = new StageTrace('storage', 'n1', dir, 4);
    for (let i = 1; i <= 10; i++) {
      t.stamp(Stage.STORAGE_RECEIVE, i, 100 * i);
      t.link(i, i + 1);
    }
    t.stamp(Stage.PEER_LEADER_ACK, 10, 5000, t.label('n2'));
    t.stamp(Stage.PEER_LEADER_ACK, 10, 5001, t.label('n3'));
    assert.equal(t.label('n2'), 0);
    assert.equal(t.length, 22);
    const file = t.write();
    assert.equal(path.basename(file), `storage-${process.pid}.json`);
    const [f] = readStageFiles(dir);
    assert.equal(f!.process, 'storage');
    assert.equal(f!.node, 'n1');
    assert.equal(f!.pid, process.pid);
    assert.deepEqual(f!.labels, ['n2', 'n3']);
    assert.equal(f!.stages[Stage.GATEWAY_ANSWER_SENT], 'GATEWAY_ANSWER_SENT');
    assert.equal(f!.stage.length, 22);
    assert.deepEqual([f!.stage[18], f!.key[18], f!.time[18]], [Stage.STORAGE_RECEIVE, 10, 1000]);
    assert.deepEqual([f!.stage[19], f!.key[19], f!.aux[19]], [Stage.LINK, 10, 11]);
    assert.deepEqual([f!.aux[20], f!.aux[21]], [0, 1]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every stage has a distinct name and id', () => {
  assert.equal(new Set(STAGE_NAMES).size, Object.keys(Stage).length);
  assert.equal(STAGE_NAMES.length, Object.keys(Stage).length);
});

test('startStages: off without KVS_STAGE_TRACE; with it, the file is written when the process exits', () => {
  assert.equal(startStages('gateway', 'n1', {}), undefined);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvs-stages-'));
  try {
    const script = `
      import { startStages, Stage } from ${STAGES_URL};
      const s = startStages('gateway', 'n7');
      s.stamp(Stage.GATEWAY_RECEIVE, 42);
      process.exit(0);`;
    execFileSync(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, KVS_STAGE_TRACE: dir } });
    assert.equal(readdirSync(dir).length, 1);
    const [f] = readStageFiles(dir);
    assert.equal(f!.node, 'n7');
    assert.deepEqual([f!.stage, f!.key], [[Stage.GATEWAY_RECEIVE], [42]]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
