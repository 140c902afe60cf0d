import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Wal, type SealedSegment, type WalOptions, type WalRecord } from './log.js';
import { FRAME_HEADER_BYTES } from '../../../shared/wal/frame.js';
import { PREALLOCATE_BYTES } from './segment-writer.js';

function tmpDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-wal-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function payloadFor(index: bigint, salt = ''): Buffer {
  const n = Number(index % 53n);
  return Buffer.from(`value-${index}${salt}-${'x'.repeat(n)}`);
}

function recs(first: bigint, count: number, salt = ''): WalRecord[] {
  const out: WalRecord[] = [];
  for (let i = 0; i < count; i++) {
    const index = first + BigInt(i);
    out.push({ index, payload: payloadFor(index, salt) });
  }
  return out;
}

function frameBytes(r: WalRecord): number {
  return FRAME_HEADER_BYTES + r.payload.byteLength;
}

function readAll(wal: Wal, from = 0n): WalRecord[] {
  return Array.from(wal.readFrom(from));
}

function assertRecords(actual: WalRecord[], expected: WalRecord[], msg = ''): void {
  assert.equal(actual.length, expected.length, `${msg} record count`);
  for (let i = 0; i < expected.length; i++) {
    assert.equal(actual[i]!.index, expected[i]!.index, `${msg} index of record ${i}`);
    assert.ok(Buffer.from(actual[i]!.payload).equals(Buffer.from(expected[i]!.payload)), `${msg} payload of record ${i}`);
  }
}

/** The WAL in `dir`, opened again, holds exactly `expected`. */
function assertReopened(dir: string, expected: WalRecord[]): void {
  const again = Wal.open(dir);
  assertRecords(readAll(again), expected);
  again.close();
}

function walFiles(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.wal'))
    .sort();
}

function name(i: bigint): string {
  return i.toString().padStart(20, '0') + '.wal';
}

/** Writes `total` single-record batches (indices 1..total) with a small segment size; returns the closed dir's records. */
function buildMultiSegment(dir: string, total: number, maxSegmentBytes = 600): WalRecord[] {
  const wal = Wal.open(dir, { maxSegmentBytes });
  const all = recs(1n, total);
  for (const r of all) wal.appendSync([r]);
  wal.close();
  return all;
}

test('empty WAL: lazy first segment, round trip of many batches, one write and one fdatasync per batch', (t) => {
  const dir = path.join(tmpDir(t), 'nested', 'wal');
  const wal = Wal.open(dir);
  assert.ok(fs.statSync(dir).isDirectory());
  assert.equal(wal.lastIndex, 0n);
  assert.equal(wal.firstIndex, 0n);
  assert.equal(wal.isEmpty, true);
  assert.deepEqual(walFiles(dir), []);
  assert.deepEqual(readAll(wal), []);

  const all: WalRecord[] = [];
  let next = 1n;
  for (let b = 0; b < 60; b++) {
    const batch = recs(next, (b % 17) + 1);
    wal.appendSync(batch);
    all.push(...batch);
    next += BigInt(batch.length);
    assert.equal(wal.lastIndex, next - 1n);
  }
  wal.appendSync([]); // no-op

  // Group commit: a batch of many records is exactly one write call and one fdatasync.
  const writes = t.mock.method(fs, 'writeSync');
  const syncs = t.mock.method(fs, 'fdatasyncSync');
  const batch = recs(next, 25);
  wal.appendSync(batch);
  all.push(...batch);
  next += 25n;
  assert.equal(writes.mock.callCount(), 1);
  assert.equal(syncs.mock.callCount(), 1);
  writes.mock.restore();
  syncs.mock.restore();
  assert.equal(wal.firstIndex, 1n);
  assert.deepEqual(walFiles(dir), [name(1n)]);
  const dataBytes = all.reduce((s, r) => s + frameBytes(r), 0);
  assert.equal(wal.activeSegment()?.bytes, dataBytes);
  // The active segment is preallocated: its file is longer, by a zero-filled tail.
  const fileBytes = fs.statSync(path.join(dir, name(1n))).size;
  assert.equal(fileBytes, Math.ceil(dataBytes / PREALLOCATE_BYTES) * PREALLOCATE_BYTES);
  assert.ok(fs.readFileSync(path.join(dir, name(1n))).subarray(dataBytes).every((b) => b === 0));
  assertRecords(readAll(wal, 1n), all);
  wal.seal();
  assert.equal(fs.statSync(path.join(dir, name(1n))).size, dataBytes, 'a sealed segment is cut to its records');
  wal.close();
  wal.close(); // idempotent
  assert.throws(() => wal.appendSync(recs(next, 1)), /closed/);
});

test('an empty log accepts any first index; resetTo positions it; resetTo refuses a non-empty log', (t) => {
  const dir = tmpDir(t);
  const a = Wal.open(path.join(dir, 'a'));
  assert.throws(() => a.appendSync([{ index: 0n, payload: Buffer.from('x') }]), RangeError);
  a.appendSync(recs(1000n, 3));
  assert.deepEqual(walFiles(path.join(dir, 'a')), [name(1000n)]);
  assert.equal(a.firstIndex, 1000n);
  assert.equal(a.lastIndex, 1002n);
  assert.throws(() => a.resetTo(5n), /resetTo/);
  a.close();

  const b = Wal.open(path.join(dir, 'b'));
  b.resetTo(499n);
  assert.equal(b.lastIndex, 499n);
  assert.throws(() => b.appendSync(recs(1n, 1)), /out of sequence/);
  assert.throws(() => b.appendSync(recs(501n, 1)), /out of sequence/);
  b.appendSync(recs(500n, 2));
  assert.deepEqual(walFiles(path.join(dir, 'b')), [name(500n)]);
  b.close();
  const b2 = Wal.open(path.join(dir, 'b'));
  assert.equal(b2.firstIndex, 500n);
  assert.equal(b2.lastIndex, 501n);
  assertRecords(readAll(b2), recs(500n, 2));
  b2.close();
});

test('index discontinuity on append throws and changes nothing', (t) => {
  const dir = tmpDir(t);
  const wal = Wal.open(dir);
  wal.appendSync(recs(1n, 5));
  const file = path.join(dir, name(1n));
  const size = fs.statSync(file).size;
  const bad: WalRecord[][] = [
    recs(7n, 1), // gap
    recs(5n, 1), // repeat
    recs(3n, 2), // backwards
    [...recs(6n, 2), ...recs(9n, 1)], // gap inside the batch
    [...recs(6n, 2), ...recs(7n, 1)], // repeat inside the batch
    [recs(6n, 1)[0]!, recs(8n, 1)[0]!, recs(7n, 1)[0]!], // out of order inside the batch
  ];
  for (const batch of bad) {
    assert.throws(() => wal.appendSync(batch), /out of sequence/);
    assert.equal(wal.lastIndex, 5n);
    assert.equal(fs.statSync(file).size, size);
  }
  wal.appendSync(recs(6n, 3));
  assert.equal(wal.lastIndex, 8n);
  assertRecords(readAll(wal), recs(1n, 8));
  wal.close();
});

test('rotation by size: segments sealed at maxSegmentBytes, named by first index, onSeal reported, batches never split', (t) => {
  const dir = tmpDir(t);
  const sealedSeen: SealedSegment[] = [];
  const max = 1000;
  const wal = Wal.open(dir, { maxSegmentBytes: max, onSeal: (s) => sealedSeen.push(s) });
  const all = recs(1n, 300);
  for (const r of all) wal.appendSync([r]);

  const sealed = wal.sealedSegments();
  assert.ok(sealed.length >= 5, `expected several sealed segments, got ${sealed.length}`);
  assert.deepEqual(sealedSeen, sealed);
  let expectFirst = 1n;
  for (const s of sealed) {
    assert.equal(s.firstIndex, expectFirst);
    assert.equal(s.name, name(s.firstIndex));
    assert.equal(s.path, path.join(dir, s.name));
    assert.equal(fs.statSync(s.path).size, s.bytes);
    assert.ok(s.bytes >= max, `sealed segment ${s.name} has ${s.bytes} bytes`);
    const lastFrame = frameBytes(all[Number(s.lastIndex) - 1]!);
    assert.ok(s.bytes - lastFrame < max, `segment ${s.name} should have been rotated before its last frame`);
    expectFirst = s.lastIndex + 1n;
  }
  const active = wal.activeSegment();
  assert.ok(active);
  assert.equal(active.firstIndex, expectFirst);
  assert.deepEqual(walFiles(dir), [...sealed.map((s) => s.name), active.name]);
  assertRecords(readAll(wal), all);

  // A batch larger than the limit lands whole in one segment.
  const big = recs(301n, 100);
  wal.appendSync(big);
  wal.appendSync(recs(401n, 1));
  const lastSealed = wal.sealedSegments().at(-1)!;
  assert.equal(lastSealed.lastIndex, 400n);
  assert.ok(lastSealed.firstIndex <= 301n);
  assert.equal(wal.activeSegment()!.firstIndex, 401n);
  assertRecords(readAll(wal), [...all, ...big, ...recs(401n, 1)]);
  wal.close();
});

test('rotation by age with an injected clock; rotateIfDue and seal', (t) => {
  const dir = tmpDir(t);
  let now = 1_000_000;
  const sealedSeen: SealedSegment[] = [];
  const wal = Wal.open(dir, { maxSegmentAgeMs: 10_000, now: () => now, onSeal: (s) => sealedSeen.push(s) });
  assert.equal(wal.rotateIfDue(), undefined);
  assert.equal(wal.seal(), undefined);

  wal.appendSync(recs(1n, 3)); // segment created at t=1_000_000
  now += 9_999;
  assert.equal(wal.rotateIfDue(), undefined);
  wal.appendSync(recs(4n, 1)); // still within age: same segment
  assert.deepEqual(walFiles(dir), [name(1n)]);
  now += 1;
  const s1 = wal.rotateIfDue();
  assert.deepEqual(s1, { path: path.join(dir, name(1n)), name: name(1n), firstIndex: 1n, lastIndex: 4n, bytes: fs.statSync(path.join(dir, name(1n))).size });
  assert.equal(wal.rotateIfDue(), undefined); // nothing active any more
  assert.equal(wal.activeSegment(), undefined);

  now += 500;
  wal.appendSync(recs(5n, 2)); // new segment at t0+10_500
  assert.deepEqual(walFiles(dir), [name(1n), name(5n)]);
  now += 9_500;
  wal.appendSync(recs(7n, 1)); // age 9_500: same segment
  now += 500;
  wal.appendSync(recs(8n, 1)); // age 10_000: rotate first, then write into a new segment
  assert.deepEqual(walFiles(dir), [name(1n), name(5n), name(8n)]);
  assert.equal(sealedSeen.length, 2);
  assert.deepEqual(
    sealedSeen.map((s) => [s.firstIndex, s.lastIndex]),
    [
      [1n, 4n],
      [5n, 7n],
    ],
  );

  // Explicit seal right away, regardless of age.
  const s3 = wal.seal();
  assert.equal(s3?.firstIndex, 8n);
  assert.equal(s3?.lastIndex, 8n);
  assert.equal(sealedSeen.length, 3);
  wal.appendSync(recs(9n, 1));
  assert.deepEqual(walFiles(dir), [name(1n), name(5n), name(8n), name(9n)]);
  assertRecords(readAll(wal), recs(1n, 9));
  wal.close();
});

test('reopening after close returns everything and appending continues', (t) => {
  const dir = tmpDir(t);
  const all = buildMultiSegment(dir, 120);
  const filesBefore = walFiles(dir);
  assert.ok(filesBefore.length >= 3);

  const wal = Wal.open(dir);
  assert.equal(wal.firstIndex, 1n);
  assert.equal(wal.lastIndex, 120n);
  assertRecords(readAll(wal), all);
  assert.equal(wal.sealedSegments().length, filesBefore.length - 1);
  assert.equal(wal.activeSegment()?.name, filesBefore.at(-1));
  assert.throws(() => wal.appendSync(recs(122n, 1)), /out of sequence/);
  const lastFile = path.join(dir, filesBefore.at(-1)!);
  const lastSize = wal.activeSegment()!.bytes;
  wal.appendSync(recs(121n, 1));
  assert.deepEqual(walFiles(dir), filesBefore, 'the reopened last segment is appended to');
  assert.equal(wal.activeSegment()?.bytes, lastSize + frameBytes(recs(121n, 1)[0]!));
  assertRecords(readAll(wal).slice(-1), recs(121n, 1));
  wal.close();

  assertReopened(dir, recs(1n, 121));
});

test('readFrom from the middle, at segment boundaries and past the end', (t) => {
  const dir = tmpDir(t);
  const all = buildMultiSegment(dir, 150);
  const wal = Wal.open(dir);
  const sealed = wal.sealedSegments();
  const points = new Set<bigint>([0n, 1n, 2n, 75n, 149n, 150n, 151n, 1000n]);
  for (const s of sealed) {
    points.add(s.firstIndex);
    points.add(s.lastIndex);
    points.add(s.lastIndex + 1n);
  }
  for (const from of points) {
    const expected = all.filter((r) => r.index >= from);
    assertRecords(readAll(wal, from), expected, `readFrom(${from})`);
  }
  // Lazy: taking only the first record does not require reading everything.
  const it = wal.readFrom(75n);
  assert.equal(it.next().value?.index, 75n);
  it.return(undefined);
  wal.close();
});

test('torn tail: a cut at every offset inside the last frame is repaired, earlier records survive, appends continue', (t) => {
  const root = tmpDir(t);
  const pristine = path.join(root, 'pristine');
  const all = buildMultiSegment(pristine, 60);
  const files = walFiles(pristine);
  assert.ok(files.length >= 2);
  const lastName = files.at(-1)!;
  const lastSize = fs.statSync(path.join(pristine, lastName)).size;
  const lastRecord = all.at(-1)!;
  const lastFrameStart = lastSize - frameBytes(lastRecord);
  assert.ok(BigInt(lastName.slice(0, 20)) < lastRecord.index, 'last segment must hold more than one frame');

  for (let cut = lastFrameStart; cut < lastSize; cut++) {
    const dir = path.join(root, `cut-${cut}`);
    fs.cpSync(pristine, dir, { recursive: true });
    const file = path.join(dir, lastName);
    fs.truncateSync(file, cut);
    const logs: { msg: string; fields?: Record<string, unknown> }[] = [];
    const wal = Wal.open(dir, { maxSegmentBytes: 600, log: (msg, fields) => logs.push({ msg, fields }) });
    assert.equal(wal.lastIndex, 59n, `cut at ${cut}`);
    assert.equal(fs.statSync(file).size, lastFrameStart, `cut at ${cut}: file truncated to the last valid frame`);
    if (cut === lastFrameStart) {
      assert.equal(logs.length, 0);
    } else {
      assert.equal(logs.length, 1, `cut at ${cut}`);
      assert.equal(logs[0]!.fields?.file, file);
      assert.equal(logs[0]!.fields?.offset, lastFrameStart);
      assert.equal(logs[0]!.fields?.reason, 'torn');
    }
    assertRecords(readAll(wal), all.slice(0, 59), `cut at ${cut}`);
    const replacement = recs(60n, 2, '-new');
    wal.appendSync(replacement);
    wal.close();
    const reopened = Wal.open(dir);
    assertRecords(readAll(reopened), [...all.slice(0, 59), ...replacement], `cut at ${cut} after reopen`);
    reopened.close();
    fs.rmSync(dir, { recursive: true });
  }
});

test('torn tail that leaves the last segment without records removes it; appending recreates it', (t) => {
  const root = tmpDir(t);
  const pristine = path.join(root, 'pristine');
  const wal0 = Wal.open(pristine);
  wal0.appendSync(recs(1n, 10));
  wal0.seal();
  wal0.appendSync(recs(11n, 1)); // the last segment has exactly one frame
  wal0.close();
  const lastFile = name(11n);
  const size = fs.statSync(path.join(pristine, lastFile)).size;

  for (let cut = 0; cut < size; cut++) {
    const dir = path.join(root, `cut-${cut}`);
    fs.cpSync(pristine, dir, { recursive: true });
    fs.truncateSync(path.join(dir, lastFile), cut);
    const wal = Wal.open(dir);
    assert.equal(wal.lastIndex, 10n, `cut at ${cut}`);
    assert.deepEqual(walFiles(dir), [name(1n)], `cut at ${cut}`);
    assert.equal(wal.activeSegment(), undefined);
    assert.throws(() => wal.appendSync(recs(12n, 1)), /out of sequence/);
    wal.appendSync(recs(11n, 1, '-new'));
    assert.deepEqual(walFiles(dir), [name(1n), name(11n)]);
    wal.close();
    const reopened = Wal.open(dir);
    assertRecords(readAll(reopened), [...recs(1n, 10), ...recs(11n, 1, '-new')]);
    reopened.close();
    fs.rmSync(dir, { recursive: true });
  }
});

test('a flipped byte in the last frame of the last segment is cut', (t) => {
  const root = tmpDir(t);
  const pristine = path.join(root, 'pristine');
  const all = buildMultiSegment(pristine, 40);
  const lastName = walFiles(pristine).at(-1)!;
  const size = fs.statSync(path.join(pristine, lastName)).size;
  const lastFrameStart = size - frameBytes(all.at(-1)!);

  // Flip a payload byte, a crc byte and an index byte.
  for (const pos of [size - 1, lastFrameStart + FRAME_HEADER_BYTES, lastFrameStart + 5, lastFrameStart + 9]) {
    const dir = path.join(root, `flip-${pos}`);
    fs.cpSync(pristine, dir, { recursive: true });
    const file = path.join(dir, lastName);
    const buf = fs.readFileSync(file);
    buf[pos]! ^= 0x01;
    fs.writeFileSync(file, buf);
    const logs: { msg: string; fields?: Record<string, unknown> }[] = [];
    const wal = Wal.open(dir, { log: (msg, fields) => logs.push({ msg, fields }) });
    assert.equal(wal.lastIndex, 39n);
    assert.equal(fs.statSync(file).size, lastFrameStart);
    assert.equal(logs.length, 1);
    assert.equal(logs[0]!.fields?.reason, 'corrupt');
    assert.equal(logs[0]!.fields?.offset, lastFrameStart);
    assertRecords(readAll(wal), all.slice(0, 39));
    wal.appendSync(recs(40n, 1, '-again'));
    assertRecords(readAll(wal, 39n), [all[38]!, ...recs(40n, 1, '-again')]);
    wal.close();
  }
});

test('a zero-filled tail of the last segment is trimmed without loss', (t) => {
  const dir = tmpDir(t);
  const all = buildMultiSegment(dir, 30);
  const lastFile = path.join(dir, walFiles(dir).at(-1)!);
  const size = fs.statSync(lastFile).size;
  fs.appendFileSync(lastFile, Buffer.alloc(4096));
  const wal = Wal.open(dir);
  assert.equal(wal.lastIndex, 30n);
  assert.equal(fs.statSync(lastFile).size, size);
  wal.appendSync(recs(31n, 1));
  wal.close();
  assertReopened(dir, [...all, ...recs(31n, 1)]);
});

test('damage in a non-last segment makes open throw naming the file and offset, and changes nothing', (t) => {
  const root = tmpDir(t);
  const pristine = path.join(root, 'pristine');
  const all = buildMultiSegment(pristine, 80);
  const files = walFiles(pristine);
  assert.ok(files.length >= 3);
  const victim = files[1]!;
  const victimFirst = BigInt(victim.slice(0, 20));
  // Offset of the third frame in the victim segment.
  const off = frameBytes(all[Number(victimFirst) - 1]!) + frameBytes(all[Number(victimFirst)]!);

  const flipped = path.join(root, 'flipped');
  fs.cpSync(pristine, flipped, { recursive: true });
  const vfile = path.join(flipped, victim);
  const buf = fs.readFileSync(vfile);
  buf[off + FRAME_HEADER_BYTES + 1]! ^= 0x80; // inside the payload
  fs.writeFileSync(vfile, buf);
  const sizes = walFiles(flipped).map((f) => fs.statSync(path.join(flipped, f)).size);
  assert.throws(
    () => Wal.open(flipped),
    (err: Error) => {
      assert.match(err.message, new RegExp(victim.replace('.', '\\.')));
      assert.match(err.message, new RegExp(`byte offset ${off}\\b`));
      assert.match(err.message, /object store/);
      return true;
    },
  );
  assert.deepEqual(
    walFiles(flipped).map((f) => fs.statSync(path.join(flipped, f)).size),
    sizes,
    'nothing may be truncated when open refuses',
  );

  // A truncated (torn) non-last segment is refused as well.
  const torn = path.join(root, 'torn');
  fs.cpSync(pristine, torn, { recursive: true });
  fs.truncateSync(path.join(torn, victim), off + 3);
  assert.throws(() => Wal.open(torn), new RegExp(`${victim.replace('.', '\\.')}.*byte offset ${off}`));

  // A missing middle segment is an index gap.
  const gap = path.join(root, 'gap');
  fs.cpSync(pristine, gap, { recursive: true });
  fs.rmSync(path.join(gap, victim));
  assert.throws(() => Wal.open(gap), new RegExp(`gap.*${files[2]!.replace('.', '\\.')}`));

  // A segment whose name disagrees with its first record.
  const renamed = path.join(root, 'renamed');
  fs.cpSync(pristine, renamed, { recursive: true });
  fs.renameSync(path.join(renamed, files[0]!), path.join(renamed, name(0n)));
  assert.throws(() => Wal.open(renamed), /file name says the first index is 0/);
});

test('removeSealedThrough deletes only fully covered sealed segments', (t) => {
  const dir = tmpDir(t);
  const all = buildMultiSegment(dir, 100);
  const wal = Wal.open(dir, { maxSegmentBytes: 600 });
  const sealed = wal.sealedSegments();
  assert.ok(sealed.length >= 3);
  const [s0, s1, s2] = sealed as [SealedSegment, SealedSegment, SealedSegment];

  assert.deepEqual(wal.removeSealedThrough(s0.firstIndex - 1n), []);
  assert.deepEqual(wal.removeSealedThrough(s0.lastIndex - 1n), []);
  assert.deepEqual(wal.removeSealedThrough(s1.lastIndex), [s0.name, s1.name]);
  assert.ok(!fs.existsSync(s0.path));
  assert.ok(!fs.existsSync(s1.path));
  assert.ok(fs.existsSync(s2.path));
  assert.equal(wal.firstIndex, s2.firstIndex);
  assert.equal(wal.lastIndex, 100n);
  assertRecords(readAll(wal), all.filter((r) => r.index >= s2.firstIndex));

  // Everything: all sealed segments go, the active one stays.
  const active = wal.activeSegment()!;
  const removed = wal.removeSealedThrough(1000n);
  assert.deepEqual(removed, sealed.slice(2).map((s) => s.name));
  assert.deepEqual(walFiles(dir), [active.name]);
  assert.deepEqual(wal.sealedSegments(), []);
  assert.equal(wal.firstIndex, active.firstIndex);
  wal.appendSync(recs(101n, 1));
  wal.close();

  const again = Wal.open(dir);
  assert.equal(again.firstIndex, active.firstIndex);
  assertRecords(readAll(again), [...all, ...recs(101n, 1)].filter((r) => r.index >= active.firstIndex));
  again.close();
});

function ioError(code: string): NodeJS.ErrnoException {
  const e: NodeJS.ErrnoException = new Error(`${code}: injected`);
  e.code = code;
  return e;
}

test('a failed write (partial) or failed fdatasync rolls the file back and nothing advances', (t) => {
  const dir = tmpDir(t);
  const wal = Wal.open(dir);
  wal.appendSync(recs(1n, 10));
  const file = path.join(dir, name(1n));
  // The data's end, not the file's: the active segment has a preallocated zero tail, which a
  // rollback cuts away with the failed bytes.
  const size = wal.activeSegment()!.bytes;

  const realWrite = fs.writeSync;
  const w = t.mock.method(fs, 'writeSync', ((fd: number, buffer: Uint8Array, offset: number, length: number, position: number) => {
    if (w.mock.callCount() === 0) return realWrite(fd, buffer, offset, Math.max(1, length >> 1), position); // partial
    throw ioError('ENOSPC');
  }) as unknown as typeof fs.writeSync);
  assert.throws(() => wal.appendSync(recs(11n, 5)), /ENOSPC/);
  w.mock.restore();
  assert.equal(wal.lastIndex, 10n);
  assert.equal(fs.statSync(file).size, size, 'partial write must be truncated away');
  assert.equal(wal.activeSegment()?.bytes, size);

  const realSync = fs.fdatasyncSync;
  const s = t.mock.method(fs, 'fdatasyncSync', (fd: number) => {
    if (s.mock.callCount() === 0) throw ioError('EIO'); // the append's sync fails, the rollback's sync works
    realSync(fd);
  });
  assert.throws(() => wal.appendSync(recs(11n, 5)), /EIO/);
  s.mock.restore();
  assert.equal(wal.lastIndex, 10n);
  assert.equal(fs.statSync(file).size, size);

  const retry = recs(11n, 5, '-retry');
  wal.appendSync(retry);
  assert.equal(wal.lastIndex, 15n);
  wal.close();
  assertReopened(dir, [...recs(1n, 10), ...retry]);
});

test('a failed first write on a never-used log leaves no trace; another start index is then accepted', (t) => {
  const dir = tmpDir(t);
  const wal = Wal.open(dir);
  const w = t.mock.method(fs, 'writeSync', () => {
    throw ioError('EIO');
  });
  assert.throws(() => wal.appendSync(recs(50n, 2)), /EIO/);
  w.mock.restore();
  assert.equal(wal.lastIndex, 0n);
  assert.equal(wal.isEmpty, true);
  wal.appendSync(recs(70n, 2));
  assert.deepEqual(walFiles(dir), [name(70n)]);
  wal.close();
  assertReopened(dir, recs(70n, 2));
});

test('if the rollback itself fails the WAL refuses further use; reopening repairs the tail', (t) => {
  const dir = tmpDir(t);
  const wal = Wal.open(dir);
  wal.appendSync(recs(1n, 4));
  const realWrite = fs.writeSync;
  const w = t.mock.method(fs, 'writeSync', ((fd: number, buffer: Uint8Array, offset: number, length: number, position: number) => {
    realWrite(fd, buffer, offset, 5, position); // a few bytes of the first frame reach the file
    throw ioError('EIO');
  }) as unknown as typeof fs.writeSync);
  const tr = t.mock.method(fs, 'ftruncateSync', () => {
    throw ioError('EROFS');
  });
  assert.throws(() => wal.appendSync(recs(5n, 3)), /EIO/);
  w.mock.restore();
  tr.mock.restore();
  assert.ok(wal.failure);
  assert.throws(() => wal.appendSync(recs(5n, 3)), /unusable/);
  wal.close();

  const logs: string[] = [];
  const again = Wal.open(dir, { log: (msg) => logs.push(msg) });
  assert.equal(again.lastIndex, 4n);
  assert.equal(logs.length, 1);
  assertRecords(readAll(again), recs(1n, 4));
  again.appendSync(recs(5n, 1));
  again.close();
});

test('after a crash the preallocated zero tail is cut and appending continues at the data end', (t) => {
  const dir = tmpDir(t);
  const crashed = Wal.open(dir);
  crashed.appendSync(recs(1n, 3));
  // No close: the process "dies" with the active segment's zero-filled tail on disk.
  const file = path.join(dir, name(1n));
  assert.equal(fs.statSync(file).size, PREALLOCATE_BYTES);
  const wal = Wal.open(dir);
  assertRecords(readAll(wal), recs(1n, 3));
  wal.appendSync(recs(4n, 2));
  assertRecords(readAll(wal), [...recs(1n, 3), ...recs(4n, 2)]);
  wal.close();
  assertRecords(readAll(Wal.open(dir)), [...recs(1n, 3), ...recs(4n, 2)]);
});

test('onAppend sees each batch once it is written, and no batch that was refused', (t) => {
  const seen: bigint[][] = [];
  const wal = Wal.open(tmpDir(t), { onAppend: (records) => seen.push(records.map((r) => r.index)) });
  wal.appendSync(recs(1n, 3));
  assert.throws(() => wal.appendSync(recs(7n, 1)), /out of sequence/);
  wal.appendSync(recs(4n, 1));
  wal.close();
  assert.deepEqual(seen, [[1n, 2n, 3n], [4n]]);
});

test('truncateAfter drops records after an index across segments; appends continue there; reopening agrees', (t) => {
  const dir = tmpDir(t);
  const all = buildMultiSegment(dir, 40);
  const wal = Wal.open(dir, { maxSegmentBytes: 600 });
  assert.ok(wal.sealedSegments().length >= 2, 'several segments');
  // Inside the first (sealed) segment: later segments go, it is cut and becomes the active one.
  assert.equal(wal.truncateAfter(17n), 23);
  assert.equal(wal.lastIndex, 17n);
  assertRecords(readAll(wal), all.slice(0, 17));
  assert.throws(() => wal.appendSync(recs(19n, 1)), /out of sequence/);
  const next = recs(18n, 3, 'new');
  wal.appendSync(next);
  assertRecords(readAll(wal), [...all.slice(0, 17), ...next]);
  // A no-op at or past the end.
  assert.equal(wal.truncateAfter(20n), 0);
  assert.equal(wal.truncateAfter(99n), 0);
  wal.close();
  const again = Wal.open(dir, { maxSegmentBytes: 600 });
  assertRecords(readAll(again), [...all.slice(0, 17), ...next]);
  // Before the first record: everything goes and the log continues after the index.
  assert.equal(again.truncateAfter(0n), 20);
  assert.equal(again.lastIndex, 0n);
  assert.equal(readAll(again).length, 0);
  again.appendSync(recs(1n, 2, 'fresh'));
  assertRecords(readAll(again), recs(1n, 2, 'fresh'));
  again.close();
});
