// The join of `breakdown --syscalls` (bench/syscall-stages.ts) on perf script's own format and
// on hand-made puts of both shapes: kvs's (two server processes, the gateway and storage) and
// etcd's (one process, whose threads hand work on through futexes, which are not recorded).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePerfScript, syscallStages, type SyscallEvent, type SyscallKind } from './syscall-stages.js';

test('parsePerfScript reads the events the join needs, in time order, and drops failed reads', () => {
  // Lines as `perf script -F pid,tid,time,event,trace --ns` prints them (this machine's perf).
  const text = [
    '   18476/18476 35721.662600200:       syscalls:sys_enter_write: fd: 0x00000015, buf: 0x37d1b4b8, count: 0x00000160',
    '   18476/18476 35721.662590714:        syscalls:sys_exit_read: 0x173',
    '   18476/18480 35721.662591000:        syscalls:sys_exit_read: 0xfffffffffffffff5',
    '   18442/18442 35721.662500000:     syscalls:sys_enter_writev: fd: 0x00000016, vec: 0x7ffca49960d8, vlen: 0x00000003',
    '   18465/18465 35721.663000000: syscalls:sys_enter_pwrite64: fd: 0x00000017, buf: 0x34986c50, count: 0x0000016a, pos: 0x0',
    '   18465/18465 35721.663010000: syscalls:sys_enter_fdatasync: fd: 0x00000017',
    '   18465/18465 35721.663400000:  syscalls:sys_exit_fdatasync: 0x0',
    '   18465/18465 35721.663500000: syscalls:sys_exit_epoll_pwait: 0x1',
    'not a line of perf script',
  ].join('\n');
  const events = parsePerfScript(text);
  assert.deepEqual(
    events.map((e) => [e.pid, e.tid, e.kind, e.bytes]),
    [
      [18442, 18442, 'write', 3],
      [18476, 18476, 'read', 0x173],
      [18476, 18476, 'write', 0x160],
      [18465, 18465, 'write', 0x16a],
      [18465, 18465, 'fsync-enter', 0],
      [18465, 18465, 'fsync-exit', 0],
    ],
  );
  assert.ok(Math.abs(events[1]!.us - 35721662590.714) < 0.01, String(events[1]!.us));
  assert.equal(events[4]!.fd, 0x17);
});

const CLIENT = 1;
const GATEWAY = 10;
const STORAGE = 20;
const ETCD = 30;
const SUPERVISOR = 40;
const names = new Map([
  [CLIENT, 'client'],
  [GATEWAY, 'gateway'],
  [STORAGE, 'storage'],
  [ETCD, 'etcd'],
  [SUPERVISOR, 'supervisor'],
]);
const ev = (pid: number, us: number, kind: SyscallKind, tid = pid, bytes = 100): SyscallEvent => ({ pid, tid, us, kind, bytes });
const sync = (pid: number, us: number, fd: number, tid = pid): SyscallEvent => ({ pid, tid, us, kind: 'fsync-enter', bytes: 0, fd });
const WAL_FD = 23;

/** One kvs put starting at `t0`: each gap is a different number of µs, so a stage shows its own. */
function kvsPut(t0: number): SyscallEvent[] {
  return [
    ev(CLIENT, t0 + 10, 'write'), // the request
    ev(SUPERVISOR, t0 + 20, 'read'), // a bystander's read, before the gateway's: not the server's
    ev(GATEWAY, t0 + 30, 'read'),
    ev(GATEWAY, t0 + 70, 'write'), // to storage
    ev(SUPERVISOR, t0 + 100, 'read'), // a bystander: not on the put's path
    ev(STORAGE, t0 + 150, 'read'),
    ev(STORAGE, t0 + 160, 'write', STORAGE + 1), // another thread of storage's: not the WAL write
    // Another file's sync, before the WAL's (an upload's, LMDB's): in some puts only, so the
    // WAL's file is the one synced most often.
    ...(t0 % 2_000 === 0 ? [sync(STORAGE, t0 + 170, 31, STORAGE + 1), ev(STORAGE, t0 + 180, 'fsync-exit', STORAGE + 1)] : []),
    ev(STORAGE, t0 + 310, 'write'), // the WAL
    sync(STORAGE, t0 + 320, WAL_FD),
    ev(STORAGE, t0 + 640, 'fsync-exit'),
    ev(STORAGE, t0 + 700, 'write'), // the answer, to the gateway
    ev(CLIENT, t0 + 760, 'read'), // a WINDOW_UPDATE, say: the client is never a handoff
    ev(GATEWAY, t0 + 790, 'read'),
    ev(GATEWAY, t0 + 850, 'write'), // to the client
    ev(CLIENT, t0 + 880, 'read'),
  ];
}

const p50 = (list?: number[]) => list && [...list].sort((a, b) => a - b)[list.length >> 1];

test('syscallStages: kvs puts, each handoff between its processes a stage of its own', () => {
  const events = [...kvsPut(1_000), ...kvsPut(2_000), ...kvsPut(3_000).filter((e) => e.fd !== WAL_FD), sync(STORAGE, 4_000, WAL_FD)];
  const puts = [1_000, 2_000, 3_000].map((t) => ({ send: t, receive: t + 900 }));
  const { samples, unmatched } = syscallStages(events, puts, CLIENT, names);
  assert.equal(unmatched, 1, 'the put without an fdatasync is not joined');
  const expected: Record<string, number> = {
    'client: stamp → write()': 10,
    'client write() → server read()': 20,
    'server read() → WAL write': 280,
    '  request: gateway: own work': 40,
    '  request: gateway → storage': 80,
    '  request: storage: own work': 160,
    'WAL write → fdatasync returns': 330,
    '  of which fdatasync': 320,
    'fdatasync returns → answer written': 210,
    '  answer: storage: own work': 60,
    '  answer: storage → gateway': 90,
    '  answer: gateway: own work': 60,
    'answer written → client read()': 30,
    'client: read() → stamp': 20,
    total: 900,
  };
  assert.deepEqual([...samples.keys()], Object.keys(expected), 'the stages, in the order they happen');
  for (const [name, v] of Object.entries(expected)) assert.deepEqual(samples.get(name), [v, v], name);
});

test('syscallStages: an etcd put has the same main stages and no handoffs', () => {
  const t0 = 5_000;
  const events = [
    ev(CLIENT, t0 + 10, 'write'),
    ev(ETCD, t0 + 40, 'read', 31),
    ev(ETCD, t0 + 90, 'write', 31), // a WINDOW_UPDATE from the reading thread
    sync(ETCD, t0 + 100, 7, 34), // bbolt's, on another file
    ev(ETCD, t0 + 110, 'fsync-exit', 34),
    ev(ETCD, t0 + 140, 'write', 32), // the WAL, by the thread that syncs
    sync(ETCD, t0 + 150, 10, 32),
    ev(ETCD, t0 + 450, 'fsync-exit', 32),
    ev(ETCD, t0 + 520, 'write', 33), // the answer
    ev(CLIENT, t0 + 560, 'read'),
  ];
  // The WAL's file is the one synced most often: a second put's worth of its syncs.
  const { samples, unmatched } = syscallStages([...events, sync(ETCD, t0 + 700, 10, 32)], [{ send: t0, receive: t0 + 600 }], CLIENT, names);
  assert.equal(unmatched, 0);
  assert.equal(p50(samples.get('client write() → server read()')), 30);
  assert.equal(p50(samples.get('server read() → WAL write')), 100);
  assert.equal(p50(samples.get('WAL write → fdatasync returns')), 310);
  assert.equal(p50(samples.get('fdatasync returns → answer written')), 70);
  assert.equal(p50(samples.get('answer written → client read()')), 40);
  assert.ok(![...samples.keys()].some((k) => k.startsWith('  request') || k.startsWith('  answer')), [...samples.keys()].join(', '));
});
