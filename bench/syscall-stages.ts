// The stages of one serial put as the kernel saw them (`npm run breakdown -- --syscalls`): the
// server's and the client's reads, writes and fdatasync, recorded by `perf record` on
// CLOCK_MONOTONIC (bench/syscall-trace.ts) and joined here with the client's own send and
// receive stamps. The same stages for kvs and for etcd, so that the two are compared where
// etcd has no stage stamps of its own; pure functions, so the join is unit-tested.

export type SyscallKind = 'read' | 'write' | 'fsync-enter' | 'fsync-exit';

export interface SyscallEvent {
  pid: number;
  tid: number;
  /** CLOCK_MONOTONIC, µs. */
  us: number;
  kind: SyscallKind;
  /** Bytes read (the syscall's result) or asked to write; 0 for the fsync events. */
  bytes: number;
  /** The file descriptor synced (fsync-enter only). */
  fd?: number;
}

/** perf's tracepoints, by what they are to the join. */
export const TRACEPOINTS: Readonly<Record<string, SyscallKind>> = {
  'syscalls:sys_exit_read': 'read',
  'syscalls:sys_exit_recvfrom': 'read',
  'syscalls:sys_exit_recvmsg': 'read',
  'syscalls:sys_enter_write': 'write',
  'syscalls:sys_enter_writev': 'write',
  'syscalls:sys_enter_pwrite64': 'write',
  'syscalls:sys_enter_pwritev': 'write',
  'syscalls:sys_enter_sendto': 'write',
  'syscalls:sys_enter_sendmsg': 'write',
  'syscalls:sys_enter_fdatasync': 'fsync-enter',
  'syscalls:sys_exit_fdatasync': 'fsync-exit',
  'syscalls:sys_enter_fsync': 'fsync-enter',
  'syscalls:sys_exit_fsync': 'fsync-exit',
};

const LINE = /^\s*(\d+)\/(\d+)\s+(?:\[\d+\]\s+)?([\d.]+):\s+(\S+):\s*(.*)$/;

/**
 * Parses `perf script -F pid,tid,time,event,trace --ns` output (time in seconds, from a
 * recording made with `-k CLOCK_MONOTONIC`). A read's bytes are its result (an error or EOF
 * is dropped: it read nothing); a write's are its `count` (or `vlen` for writev, a count of
 * buffers, which only says it wrote).
 */
export function parsePerfScript(text: string): SyscallEvent[] {
  const out: SyscallEvent[] = [];
  for (const line of text.split('\n')) {
    const m = LINE.exec(line);
    if (!m) continue;
    const kind = TRACEPOINTS[m[4]!.replace(/:$/, '')];
    if (!kind) continue;
    const rest = m[5]!;
    let bytes = 0;
    let fd: number | undefined;
    if (kind === 'fsync-enter') {
      const m = /fd: (0x[0-9a-f]+)/.exec(rest);
      if (m) fd = Number(m[1]);
    } else if (kind === 'read') {
      bytes = Number(BigInt.asIntN(64, BigInt(rest.trim())));
      if (bytes <= 0) continue;
    } else if (kind === 'write') {
      const count = /(?:count|len|vlen): (0x[0-9a-f]+)/.exec(rest);
      bytes = count ? Number(count[1]) : 1;
    }
    out.push({ pid: Number(m[1]), tid: Number(m[2]), us: Number(m[3]) * 1e6, kind, bytes, ...(fd === undefined ? {} : { fd }) });
  }
  return out.sort((a, b) => a.us - b.us);
}

export interface TimedPut {
  send: number;
  receive: number;
}

export interface SyscallStages {
  /** Stage name → one sample (µs) per put that had it, in the order the stages happen. */
  samples: Map<string, number[]>;
  /** Puts whose window lacked an event a stage needs (no fdatasync: a put batched with another). */
  unmatched: number;
}

/**
 * Joins the events with the client's puts (one at a time, so each put owns the events inside
 * its send..receive window). Per put:
 * - the client's write() of the request;
 * - the WAL's fdatasync: the first after it on the file that the servers sync most often
 *   (another file's sync, etcd's bbolt every 100 ms or an archiver's upload, is not a stage);
 * - the first read after the request by a server process on the path to that fdatasync (the
 *   process that syncs, or one that writes before it: not a bystander such as the supervisor);
 * - the syncing thread's last write before its fdatasync (the WAL write);
 * - the server's last write before the client's last read (the answer), and that read.
 * Between the request's read and the WAL write, and between the fdatasync and the answer, each
 * handoff from one server process to another (kvs's gateway → storage and back) is a stage of
 * its own: the sender's last write before the receiver's first read. `names`: pid → label.
 */
export function syscallStages(events: readonly SyscallEvent[], puts: readonly TimedPut[], clientPid: number, names: ReadonlyMap<number, string>): SyscallStages {
  const samples = new Map<string, number[]>();
  const add = (name: string, v: number) => {
    let list = samples.get(name);
    if (!list) samples.set(name, (list = []));
    list.push(v);
  };
  const name = (pid: number) => names.get(pid) ?? `pid ${pid}`;
  const wal = walFile(events, clientPid);
  let unmatched = 0;
  let from = 0;
  for (const put of puts) {
    while (from < events.length && events[from]!.us < put.send) from++;
    let to = from;
    while (to < events.length && events[to]!.us <= put.receive) to++;
    const w = events.slice(from, to);
    const client = (e: SyscallEvent) => e.pid === clientPid;
    const c0 = w.findIndex((e) => client(e) && e.kind === 'write');
    const enter = w.findIndex((e, i) => i > c0 && e.kind === 'fsync-enter' && e.pid === wal?.pid && e.fd === wal.fd);
    const syncer = enter < 0 ? undefined : w[enter]!;
    const a = w.findIndex(
      (e, i) => i > c0 && i < enter && !client(e) && e.kind === 'read' && (e.pid === syncer!.pid || w.some((x, j) => j > i && j < enter && x.pid === e.pid && x.kind === 'write')),
    );
    const exit = enter < 0 ? -1 : w.findIndex((e, i) => i > enter && e.tid === syncer!.tid && e.kind === 'fsync-exit');
    const r = lastIndex(w, (e, i) => i > exit && client(e) && e.kind === 'read');
    const d = lastIndex(w, (e, i) => i > a && i < enter && e.tid === syncer!.tid && e.kind === 'write');
    const ans = lastIndex(w, (e, i) => i > exit && i < r && !client(e) && e.kind === 'write');
    if (c0 < 0 || a < 0 || enter < 0 || exit < 0 || r < 0 || ans < 0) {
      unmatched++;
      continue;
    }
    const t = (i: number) => w[i]!.us;
    const walWrite = d < 0 ? enter : d;
    add('client: stamp → write()', t(c0) - put.send);
    add('client write() → server read()', t(a) - t(c0));
    add('server read() → WAL write', t(walWrite) - t(a));
    hops(w, a, walWrite, clientPid, name, (stage, v) => add(`  request: ${stage}`, v));
    add('WAL write → fdatasync returns', t(exit) - t(walWrite));
    add('  of which fdatasync', t(exit) - t(enter));
    add('fdatasync returns → answer written', t(ans) - t(exit));
    hops(w, exit, ans, clientPid, name, (stage, v) => add(`  answer: ${stage}`, v));
    add('answer written → client read()', t(r) - t(ans));
    add('client: read() → stamp', put.receive - t(r));
    add('total', put.receive - put.send);
  }
  return { samples, unmatched };
}

/** The (process, file descriptor) synced most often by the servers: the WAL's. */
function walFile(events: readonly SyscallEvent[], clientPid: number): { pid: number; fd: number } | undefined {
  const counts = new Map<string, { pid: number; fd: number; n: number }>();
  for (const e of events) {
    if (e.kind !== 'fsync-enter' || e.pid === clientPid || e.fd === undefined) continue;
    const k = `${e.pid}/${e.fd}`;
    const c = counts.get(k) ?? { pid: e.pid, fd: e.fd, n: 0 };
    c.n++;
    counts.set(k, c);
  }
  let best: { pid: number; fd: number; n: number } | undefined;
  for (const c of counts.values()) if (!best || c.n > best.n) best = c;
  return best && { pid: best.pid, fd: best.fd };
}

/**
 * From event `start` to event `end`, each handoff between two server processes: the time the
 * sending process spent from its first event of the stage to its last write before the next
 * process read, and the crossing from that write to that read. Nothing when one process did
 * both ends (etcd: its threads hand work on through futexes, which are not recorded).
 */
function hops(w: readonly SyscallEvent[], start: number, end: number, clientPid: number, name: (pid: number) => string, add: (stage: string, v: number) => void): void {
  if (w[start]!.pid === w[end]!.pid) return;
  let at = start;
  while (w[at]!.pid !== w[end]!.pid) {
    const here = w[at]!.pid;
    // The next process on the path: one that reads and then writes on toward `end` (a read by
    // a bystander, the supervisor collecting metrics say, is not a handoff). Its first read is
    // taken as the handoff's arrival; an unrelated read of its own just before (a timer's
    // eventfd) would shorten the crossing, which shows in the tails, not the medians.
    const onPath = (e: SyscallEvent, i: number) =>
      e.pid === w[end]!.pid || w.some((x, j) => j > i && j <= end && x.pid === e.pid && x.kind === 'write');
    const next = w.findIndex((e, i) => i > at && i <= end && e.pid !== here && e.pid !== clientPid && e.kind === 'read' && onPath(e, i));
    if (next < 0) return;
    const sent = lastIndex(w, (e, i) => i >= at && i < next && e.pid === here && e.kind === 'write');
    if (sent < 0) return;
    add(`${name(here)}: own work`, w[sent]!.us - w[at]!.us);
    add(`${name(here)} → ${name(w[next]!.pid)}`, w[next]!.us - w[sent]!.us);
    at = next;
  }
  add(`${name(w[end]!.pid)}: own work`, w[end]!.us - w[at]!.us);
}

function lastIndex<T>(list: readonly T[], pred: (x: T, i: number) => boolean): number {
  for (let i = list.length - 1; i >= 0; i--) if (pred(list[i]!, i)) return i;
  return -1;
}
