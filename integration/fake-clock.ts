// A wall clock a test can move, for one kvs node only: Debian's libfaketime (package
// `libfaketime`, pulled in by `faketime`; .ci/run installs it), preloaded into the node's
// processes through the environment the test gives startKvs. Nothing in kvs knows about it.
//
// - FAKETIME_TIMESTAMP_FILE: the offset ("+900" = 15 minutes ahead) is read from a file the
//   test rewrites; FAKETIME_NO_CACHE=1 makes every clock read see the file as it is now, so a
//   move counts from the next Date.now() on (no 10 s cache to wait out). A read costs ~10 µs.
// - FAKETIME_DONT_FAKE_MONOTONIC=1: only the wall clock (CLOCK_REALTIME: Date.now, new Date)
//   moves. The monotonic clock stays real: libuv's timers, performance.now and
//   process.hrtime run on it, and moving it by minutes would fire every pending timer at once
//   (gRPC keepalives, backoffs, grace periods).
// - NO_FAKE_STAT=1: file timestamps stay real.
// - libfaketimeMT: the variant for multi-threaded programs (node is).
import assert from 'node:assert/strict';
import { existsSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { runCommand, tempDir, type Ctx } from '../testkit/harness.js';

const LIB = 'libfaketimeMT.so.1';

/** Where Debian puts the library (/usr/lib/<multiarch>/faketime/), or undefined. */
export function faketimeLibrary(): string | undefined {
  const dirs = ['/usr/lib/faketime', '/usr/local/lib/faketime'];
  try {
    for (const d of readdirSync('/usr/lib')) if (d.includes('-linux-')) dirs.unshift(path.join('/usr/lib', d, 'faketime'));
  } catch {}
  return dirs.map((d) => path.join(d, LIB)).find((f) => existsSync(f));
}

export interface FakeClock {
  /** The environment that puts a process on this clock. */
  env: Record<string, string>;
  /** Seconds the clock is ahead of the real one. */
  readonly offsetSec: number;
  /** Moves the clock forward (or back, negative) by `sec` seconds; effective at once. */
  advance(sec: number): void;
}

/**
 * A fake wall clock, at real time until moved. Fails (rather than skips) when libfaketime is
 * missing or does not move node's Date.now, so a test relying on it cannot pass vacuously.
 */
export async function fakeClock(t: Ctx): Promise<FakeClock> {
  const lib = faketimeLibrary();
  assert.ok(lib, `${LIB} not found: install Debian's faketime package (.ci/run does)`);
  const file = path.join(await tempDir(t, 'kvs-faketime-'), 'faketimerc');
  let offsetSec = 0;
  // Whole or not at all (a reader must never see the file empty): write aside, then rename.
  const write = () => {
    writeFileSync(`${file}.tmp`, `${offsetSec >= 0 ? '+' : ''}${offsetSec}\n`);
    renameSync(`${file}.tmp`, file);
  };
  write();
  const env = {
    LD_PRELOAD: lib,
    FAKETIME_TIMESTAMP_FILE: file,
    FAKETIME_NO_CACHE: '1',
    FAKETIME_DONT_FAKE_MONOTONIC: '1',
    NO_FAKE_STAT: '1',
  };
  // The mechanism works with this node: Date.now follows the file, the monotonic clock does not.
  offsetSec = 3600;
  write();
  const probe = await runCommand(process.execPath, ['-e', 'const m = performance.now(); console.log(JSON.stringify({ wall: Date.now(), mono: performance.now() - m }))'], { env });
  assert.equal(probe.exitCode, 0, probe.stderr);
  const { wall, mono } = JSON.parse(probe.stdout) as { wall: number; mono: number };
  const ahead = wall - Date.now();
  assert.ok(ahead > 3590_000 && ahead < 3610_000, `a node under ${lib} should be an hour ahead; it is ${ahead} ms ahead`);
  assert.ok(mono < 60_000, `the monotonic clock must stay real (moved ${mono} ms)`);
  offsetSec = 0;
  write();
  return {
    env,
    get offsetSec() {
      return offsetSec;
    },
    advance(sec: number) {
      offsetSec += sec;
      write();
    },
  };
}
