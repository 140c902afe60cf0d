// What a node prints: --log-format (pretty, and JSON off a terminal by default) and what
// --log-level debug adds (WAL entries, object-store operations).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { stripVTControlCharacters } from 'node:util';
import { client, localObjectStore, pollUntil, startKvs, type KvsNode } from '../testkit/harness.js';

const lines = (node: KvsNode) => stripVTControlCharacters(node.output()).split('\n').filter((l) => l.trim() !== '');

function jsonLines(node: KvsNode): Record<string, unknown>[] {
  return lines(node).map((l) => {
    try {
      return JSON.parse(l) as Record<string, unknown>;
    } catch {
      assert.fail(`not a JSON line: ${l}\n--- output ---\n${node.output()}`);
    }
  });
}

/** The first output line that `match` accepts, once there is one. */
const line = <T>(node: KvsNode, what: string, match: (line: string) => T | undefined) =>
  pollUntil(what, async () => lines(node).map(match).find((m) => m !== undefined), 20_000);

test('--log-format pretty: readable lines naming the component, down to the last one before exit', async (t) => {
  const node = await startKvs(t, { objectStore: await localObjectStore(t), args: ['--log-format', 'pretty'] });
  await client(t, node.endpoint).put('a').value('1');
  // A checkpoint's progress lines, which the archiver writes through its logger.
  const checkpoint = await node.ctl(['checkpoint']);
  assert.equal(checkpoint.exitCode, 0, checkpoint.stderr);
  await line(node, '"kvs ready"', (l) => (l.includes('kvs ready') ? l : undefined));
  await node.stop();
  const out = lines(node);
  const header = /^\[\d\d:\d\d:\d\d\.\d{3}\] (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) \((supervisor|archiver|storage|gateway)\/\d+\): \S/;
  // Fields follow the message on the same line; only an error's stack continues, indented.
  for (const l of out) assert.ok(header.test(l) || /^\s/.test(l), `not a pretty log line: ${l}`);
  for (const l of out) assert.throws(() => JSON.parse(l), SyntaxError, `a JSON line: ${l}`);
  const components = new Set(out.map((l) => header.exec(l)?.[2]).filter(Boolean));
  assert.deepEqual([...components].sort(), ['archiver', 'gateway', 'storage', 'supervisor']);
  assert.match(out.find((l) => l.includes('kvs ready'))!, /INFO \(supervisor\/\d+\): kvs ready: .* \{"listen":"127\.0\.0\.1:\d+","dataDir":".*"\}$/);
  assert.ok(out.some((l) => /INFO \(archiver\/\d+\): checkpoint: revision \d+: pieces \d+\/\d+ \{"phase":/.test(l)), 'no checkpoint progress line');
  // Logged right before process.exit.
  assert.match(out.at(-1)!, /INFO \(supervisor\/\d+\): kvs stopped$/);
});

test('without --log-format, stdout not a terminal: JSON lines', async (t) => {
  const node = await startKvs(t);
  await line(node, '"kvs ready"', (l) => (l.includes('kvs ready') ? l : undefined));
  await node.stop();
  const records = jsonLines(node);
  assert.deepEqual([...new Set(records.map((r) => r.component))].sort(), ['gateway', 'storage', 'supervisor']);
  for (const r of records) {
    assert.equal(typeof r.level, 'number');
    assert.equal(typeof r.time, 'number');
    assert.equal(typeof r.msg, 'string');
  }
  assert.equal(records.at(-1)!.msg, 'kvs stopped');
});

test('--log-level debug: a line per WAL entry and per object-store operation', async (t) => {
  const store = await localObjectStore(t);
  const node = await startKvs(t, { objectStore: store, args: ['--log-level', 'debug'] });
  await client(t, node.endpoint).put('debug-key').value('debug-value');
  const records = () => lines(node).map((l) => JSON.parse(l) as Record<string, unknown>);
  const entry = await pollUntil('a WAL entry line for the put', async () =>
    records().find((r) => r.component === 'storage' && r.msg === 'WAL entry' && r.kind === 'put'), 20_000);
  assert.equal(entry.level, 20);
  assert.equal(typeof entry.index, 'number');
  assert.equal(typeof entry.revision, 'number');
  assert.equal(entry.mutations, 1);
  // The write's WAL object (sync upload).
  const upload = await pollUntil('an object-store line for the WAL upload', async () =>
    records().find((r) => r.component === 'archiver' && r.msg === 'object store operation' && r.op === 'put' && String(r.key).startsWith('wal/')), 20_000);
  assert.equal(upload.outcome, 'ok');
  assert.ok((upload.bytes as number) > 0);
  assert.equal(typeof upload.durationMs, 'number');
  // Debug lines carry no user data.
  for (const r of records()) if (r.msg === 'WAL entry' || r.msg === 'object store operation') assert.doesNotMatch(JSON.stringify(r), /debug-(key|value)/);
});
