// The fuzz cases both ports share: a connection of raw HTTP/2 frames (broken framing, frames in
// the wrong order), a connection of gRPC streams through node:http2 (well-framed calls with odd
// headers, lying length prefixes, compressed flags, resets, half-open streams), and bytes that
// are not HTTP/2 at all. A target (client-cases.ts, peer-cases.ts) supplies the methods and the
// message bodies; each case is one connection, and its outcome is whether the server answered
// it, closed it, or neither before the case's deadline.
import http2 from 'node:http2';
import zlib from 'node:zlib';
import { Flag, FrameType, PREFACE, frame, goaway, grpcHeaders, grpcMessage, headerBlock, priority, rstStream, settings, windowUpdate } from '../../testkit/h2-frames.js';
import { http2Frames, rawExchange } from '../../testkit/raw-socket.js';
import { UNDECODABLE, type MethodInfo } from './bodies.js';
import { staysInScratch } from './scratch-guard.js';
import type { Rand } from './random.js';

/**
 * 'open-after-goaway': the server sent GOAWAY with an error code, then neither closed the
 * connection nor read from it (RFC 9113 5.4.1: it MUST close it). node:http2 does this after
 * some connection errors (docs/reliability.md#port-fuzzing); counted apart from 'hung'.
 */
export type Outcome = 'answered' | 'closed' | 'hung' | 'open-after-goaway';

export interface CaseResult {
  outcome: Outcome;
}

export interface Case {
  /** What kind of case, for the summary and a failure report. */
  kind: string;
  /** One line: what it sends. */
  describe: string;
  /** `answerMs`: how long the server has to answer or close once the client is done (ANSWER_MS). */
  run(endpoint: string, answerMs?: number): Promise<CaseResult>;
  /** The bytes a raw case writes, one buffer per write (for a closer look at a replay). */
  writes?: Buffer[];
}

/** What a target gives the shared cases. */
export interface TargetSpec {
  methods: readonly MethodInfo[];
  /** Bodies of the messages of one call of `method` (usually one; several for a stream). */
  messages(rand: Rand, method: MethodInfo): Buffer[];
  /** Methods whose calls may wait indefinitely by design (a watch, a lock): always sent with a deadline. */
  blocking: ReadonlySet<string>;
  /** Headers a real caller sends (the peer port's leader epoch), on most streams so cases get past them. */
  headers?: Readonly<Record<string, string>>;
}

/** How long a server has, after the client is done sending, to answer or close (by default). */
export const ANSWER_MS = 5000;

// ---------------------------------------------------------------- raw frames

interface Script {
  frames: Buffer[];
  notes: string[];
}

/** A well-formed request on `stream` (HEADERS, its messages, END_STREAM), as separate frames. */
function requestFrames(rand: Rand, spec: TargetSpec, stream: number): { frames: Buffer[]; path: string } {
  const method = rand.pick(spec.methods);
  const timeout: [string, string][] = spec.blocking.has(method.path) || rand.chance(0.3) ? [['grpc-timeout', `${rand.range(50, 1500)}m`]] : [];
  const block = headerBlock(grpcHeaders(method.path, '127.0.0.1', timeout));
  const frames: Buffer[] = [];
  if (rand.chance(0.2) && block.length > 4) {
    // The header block split across HEADERS and CONTINUATION (valid).
    const cut = rand.range(1, block.length - 1);
    frames.push(frame(FrameType.HEADERS, 0, stream, block.subarray(0, cut)), frame(FrameType.CONTINUATION, Flag.END_HEADERS, stream, block.subarray(cut)));
  } else frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS, stream, block));
  const messages = spec.messages(rand, method).map((b) => grpcMessage(b));
  if (messages.length === 0) frames.push(frame(FrameType.DATA, Flag.END_STREAM, stream));
  messages.forEach((m, i) => frames.push(frame(FrameType.DATA, i === messages.length - 1 ? Flag.END_STREAM : 0, stream, m)));
  return { frames, path: method.path };
}

/** Structural breakage of a list of frames; each returns a note of what it did. */
const BREAKAGES: ((rand: Rand, s: Script, streams: number[]) => void)[] = [
  (r, s, ids) => {
    // DATA before HEADERS: move a stream's first frame after its second.
    const id = r.pick(ids);
    const i = s.frames.findIndex((f) => f.readUInt32BE(5) === id);
    if (i >= 0 && i + 1 < s.frames.length) [s.frames[i], s.frames[i + 1]] = [s.frames[i + 1]!, s.frames[i]!];
    s.notes.push(`data-before-headers(${id})`);
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.CONTINUATION, Flag.END_HEADERS, r.pick([1, 3, 99]), headerBlock([['x-orphan', 'yes']])));
    s.notes.push('continuation-without-headers');
  },
  (r, s, ids) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, windowUpdate(r.pick([0, ...ids]), 0));
    s.notes.push('window-update-0');
  },
  (r, s, ids) => {
    const id = r.pick([0, ...ids]);
    s.frames.splice(r.int(s.frames.length + 1), 0, windowUpdate(id, 0x7fffffff), windowUpdate(id, 0x7fffffff));
    s.notes.push('window-overflow');
  },
  (r, s) => {
    // A frame whose header claims another length than it carries.
    const i = r.int(s.frames.length);
    const f = s.frames[i]!;
    const len = f.readUIntBE(0, 3);
    f.writeUIntBE(r.pick([0, Math.max(0, len - 1), len + 1, len + 100, 0xffffff]) & 0xffffff, 0, 3);
    s.notes.push(`length-lie(frame ${i})`);
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.DATA, 0, 1, r.bytes(r.pick([16385, 70000]))));
    s.notes.push('oversized-frame');
  },
  (r, s, ids) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.DATA, Flag.PADDED, r.pick(ids), Buffer.from([200, 1, 2, 3])));
    s.notes.push('padding-past-end');
  },
  (r, s, ids) => {
    const id = r.pick(ids);
    s.frames.splice(r.int(s.frames.length + 1), 0, r.chance(0.5) ? priority(id, id, 16) : frame(FrameType.PRIORITY, 0, id, Buffer.alloc(3)));
    s.notes.push('bad-priority');
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, r.chance(0.5) ? rstStream(r.pick([0, 7, 101]), 8) : frame(FrameType.RST_STREAM, 0, 1, Buffer.alloc(2)));
    s.notes.push('bad-rst-stream');
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.PING, r.pick([0, Flag.ACK]), r.pick([0, 1]), Buffer.alloc(r.pick([7, 8, 9]))));
    s.notes.push('odd-ping');
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.PUSH_PROMISE, Flag.END_HEADERS, 1, Buffer.concat([Buffer.from([0, 0, 0, 2]), headerBlock([[':path', '/']])])));
    s.notes.push('push-promise-from-client');
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, goaway(r.pick([0, 1, 0x7fffffff]), r.pick([0, 1, 2, 0xffff])));
    s.notes.push('goaway-mid-stream');
  },
  (r, s) => {
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(r.pick([0x0a, 0x42, 0xff]), 0xff, r.int(5), r.bytes(r.int(20))));
    s.notes.push('unknown-frame-type');
  },
  (r, s, ids) => {
    // A header block that does not decode: random bytes, index 0, a table size above the limit.
    const block = r.pick([r.bytes(r.range(1, 30)), Buffer.from([0x80]), Buffer.from([0x3f, 0xff, 0xff, 0xff, 0x0f]), Buffer.from([0x00, 0x7f, 0xff, 0xff, 0xff, 0x0f])]);
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, Math.max(...ids) + 2, block));
    s.notes.push('bad-hpack');
  },
  (r, s, ids) => {
    const bad = r.pick<[string, string][]>([
      [[':method', 'POST']],
      [[':path', '/etcdserverpb.KV/Range'], [':method', 'POST'], [':scheme', 'http'], ['Content-Type', 'application/grpc']],
      [[':method', 'POST'], [':scheme', 'http'], [':path', '/etcdserverpb.KV/Range'], [':authority', 'x'], ['connection', 'keep-alive']],
      [[':method', 'POST'], [':scheme', 'http'], [':path', '/etcdserverpb.KV/Range'], [':authority', 'x'], ['te', 'gzip'], [':status', '200']],
      [['content-type', 'application/grpc'], [':method', 'POST'], [':path', ''], [':scheme', 'http']],
    ]);
    s.frames.splice(r.int(s.frames.length + 1), 0, frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, Math.max(...ids) + 2, headerBlock(bad)));
    s.notes.push('malformed-headers');
  },
  (r, s, ids) => {
    const id = r.pick([0, 2, ...ids]);
    s.frames.push(frame(FrameType.DATA, Flag.END_STREAM, id, grpcMessage(Buffer.alloc(0))));
    s.notes.push(`data-after-end-stream(${id})`);
  },
  (r, s) => {
    // HEADERS opening an even (server-initiated) or lower stream id.
    const id = r.pick([0, 2, 1]);
    s.frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, id, headerBlock(grpcHeaders('/etcdserverpb.KV/Range', 'x'))));
    s.notes.push(`headers-on-stream-${id}`);
  },
  (r, s, ids) => {
    // More DATA than the initial flow-control window allows.
    const id = r.pick(ids);
    for (let i = 0; i < 5; i++) s.frames.push(frame(FrameType.DATA, 0, id, Buffer.alloc(16384)));
    s.notes.push('past-flow-control-window');
  },
  (r, s, ids) => {
    // A header block interrupted by another frame before its CONTINUATION.
    const id = Math.max(...ids) + 2;
    const block = headerBlock(grpcHeaders('/etcdserverpb.KV/Range', 'x'));
    s.frames.push(frame(FrameType.HEADERS, 0, id, block.subarray(0, 5)), frame(FrameType.DATA, 0, id, Buffer.alloc(3)), frame(FrameType.CONTINUATION, Flag.END_HEADERS, id, block.subarray(5)));
    s.notes.push('interrupted-header-block');
  },
];

const BAD_SETTINGS: (readonly (readonly [number, number])[])[] = [
  [[2, 2]], // ENABLE_PUSH other than 0/1
  [[4, 0x80000000]], // INITIAL_WINDOW_SIZE above 2^31-1
  [[5, 100]], // MAX_FRAME_SIZE below 16384
  [[5, 0x1000000]], // and above 2^24-1
  [[1, 0], [3, 0], [6, 1]], // no header table, no streams, tiny header lists (valid, hostile)
  [[0x99, 7]], // unknown id (must be ignored)
];

function rawFramesCase(rand: Rand, spec: TargetSpec): Case {
  const ids = Array.from({ length: rand.range(1, 3) }, (_, i) => 1 + 2 * i);
  const s: Script = { frames: [], notes: [] };
  const paths: string[] = [];
  for (const id of ids) {
    const r = requestFrames(rand, spec, id);
    s.frames.push(...r.frames);
    paths.push(r.path);
  }
  for (let n = rand.weighted([[1, 0], [5, 1], [2, 2], [1, 4]] as const); n > 0; n--) rand.pick(BREAKAGES)(rand, s, ids);
  const head: Buffer[] = [];
  if (rand.chance(0.05)) {
    const p = Buffer.from(PREFACE);
    p[rand.int(p.length)] ^= 0x20;
    head.push(p);
    s.notes.unshift('bad-preface');
  } else head.push(PREFACE);
  if (rand.chance(0.15)) {
    const bad = rand.pick(BAD_SETTINGS);
    head.push(settings(bad));
    s.notes.unshift(`settings${JSON.stringify(bad)}`);
  } else if (rand.chance(0.05)) {
    head.push(frame(FrameType.SETTINGS, rand.pick([0, Flag.ACK]), rand.pick([0, 1]), rand.bytes(rand.pick([5, 6, 7]))));
    s.notes.unshift('malformed-settings');
  } else head.push(settings([]));
  const bytes = Buffer.concat([...head, ...s.frames]);
  // Cut into writes at random places: a parser must not depend on TCP segment boundaries.
  const chunks: Buffer[] = [];
  for (let off = 0; off < bytes.length; ) {
    const len = rand.chance(0.7) ? bytes.length - off : rand.range(1, Math.max(1, bytes.length - off));
    chunks.push(bytes.subarray(off, off + len));
    off += len;
  }
  return {
    kind: 'raw-frames',
    describe: `raw frames: ${paths.join(', ')}; ${s.notes.join(', ') || 'well-formed'}; ${bytes.length} bytes in ${chunks.length} writes`,
    writes: chunks,
    async run(endpoint, answerMs = ANSWER_MS) {
      // The client goes quiet (then half-closes) once it has sent everything: the server must
      // have answered or closed by then, or close when it sees the end of the connection.
      const r = await rawExchange(endpoint, chunks, 500, answerMs + 2000);
      const frames = http2Frames(r.received);
      if (!r.closed) {
        const errorGoaway = hasErrorGoaway(r.received);
        return { outcome: errorGoaway ? 'open-after-goaway' : 'hung' };
      }
      const answered = frames.some((f) => (f.stream !== 0 && (f.type === FrameType.HEADERS || f.type === FrameType.RST_STREAM)) || f.type === FrameType.GOAWAY);
      return { outcome: answered ? 'answered' : 'closed' };
    },
  };
}

/**
 * A GOAWAY with an error code anywhere in what the server sent. Searched at every offset, not
 * frame by frame: after some broken input node's answer does not parse as a sequence of frames
 * from the start (a PING ACK echoing a short payload), yet ends in its GOAWAY.
 */
function hasErrorGoaway(buf: Buffer): boolean {
  for (let off = 0; off + 17 <= buf.length; off++) {
    const len = buf.readUIntBE(off, 3);
    if (buf[off + 3] === FrameType.GOAWAY && buf.readUInt32BE(off + 5) === 0 && len >= 8 && off + 9 + len <= buf.length && buf.readUInt32BE(off + 13) !== 0) return true;
  }
  return false;
}

// ---------------------------------------------------------------- not HTTP/2

function notHttp2Case(rand: Rand): Case {
  const choice = rand.int(4);
  const bytes =
    choice === 0 ? rand.bytes(rand.range(1, 4096))
    : choice === 1 ? Buffer.from(`${rand.pick(['GET', 'POST', 'PRI', 'CONNECT'])} /${rand.bytes(4).toString('hex')} HTTP/1.1\r\nHost: kvs\r\n\r\n`)
    : choice === 2 ? Buffer.concat([PREFACE.subarray(0, rand.int(PREFACE.length)), rand.bytes(rand.int(64))])
    : Buffer.alloc(rand.range(1, 2000));
  return {
    kind: 'not-http2',
    describe: `not HTTP/2: ${bytes.length} bytes starting ${bytes.subarray(0, 16).toString('hex')}`,
    async run(endpoint, answerMs = ANSWER_MS) {
      const r = await rawExchange(endpoint, bytes, 500, answerMs + 2000);
      return { outcome: r.closed ? (r.received.length > 0 ? 'answered' : 'closed') : 'hung' };
    },
  };
}

// ---------------------------------------------------------------- gRPC streams through node:http2

interface StreamPlan {
  headers: http2.OutgoingHttpHeaders;
  /** Each a complete length-prefixed message, or several writes of one. */
  writes: Buffer[];
  /** Reset by the client after this many ms (then no answer is owed). */
  resetAfterMs?: number;
  /** Left half-open: only with a deadline the server must keep. */
  end: boolean;
  notes: string[];
}

function streamPlan(rand: Rand, spec: TargetSpec): StreamPlan {
  const method = rand.pick(spec.methods);
  const notes: string[] = [method.path];
  const headers: http2.OutgoingHttpHeaders = {
    ':method': 'POST',
    ':path': method.path,
    'content-type': 'application/grpc',
    te: 'trailers',
  };
  if (spec.headers && rand.chance(0.9)) Object.assign(headers, spec.headers);
  const blocking = spec.blocking.has(method.path);
  const end = !blocking && rand.chance(0.9);
  if (blocking || !end || rand.chance(0.3)) headers['grpc-timeout'] = `${rand.range(50, 2000)}m`;
  else if (rand.chance(0.1)) {
    headers['grpc-timeout'] = rand.pick(['1n', '99999999H', 'abc', '0m', '-5S', '123456789S']);
    notes.push(`grpc-timeout=${headers['grpc-timeout']}`);
  }
  if (rand.chance(0.1)) {
    const ct = rand.pick(['application/grpc+proto', 'application/json', 'text/plain', '']);
    if (ct) headers['content-type'] = ct;
    else delete headers['content-type'];
    notes.push(`content-type=${ct || 'none'}`);
  }
  if (rand.chance(0.05)) {
    delete headers.te;
    notes.push('no-te');
  }
  if (rand.chance(0.03)) {
    headers[':method'] = rand.pick(['GET', 'PUT']);
    notes.push(`method=${headers[':method']}`);
  }
  const compression = rand.weighted([[8, 'none'], [1, 'gzip'], [1, 'lie']] as const);
  if (compression !== 'none') headers['grpc-encoding'] = rand.pick(['gzip', 'deflate', 'snappy']);
  const writes: Buffer[] = [];
  for (const body of spec.messages(rand, method)) {
    let msg: Buffer;
    let kind = rand.weighted([[12, 'plain'], [1, 'short-length'], [1, 'long-length'], [1, 'huge-length'], [1, 'oversized']] as const);
    // A short length makes the server read the body's first bytes as the message, and execute
    // it: that message must pass the scratch guard too (seed 20261129: a 1-byte body read as an
    // empty LockRequest, which takes a new lease and locks "/<lease>", outside the scratch).
    if (kind === 'short-length' && !staysInScratch(method.path, body.subarray(0, Math.max(0, body.length - 1)))) kind = 'plain';
    if (compression === 'gzip') {
      msg = grpcMessage(headers['grpc-encoding'] === 'deflate' ? zlib.deflateSync(body) : zlib.gzipSync(body), { compressed: true });
    } else if (compression === 'lie') msg = grpcMessage(body, { compressed: true });
    else if (kind === 'short-length') msg = grpcMessage(body, { declaredLength: Math.max(0, body.length - 1) });
    else if (kind === 'long-length') msg = grpcMessage(body, { declaredLength: body.length + rand.range(1, 100) });
    else if (kind === 'huge-length') msg = grpcMessage(body, { declaredLength: rand.pick([0x7fffffff, 0xffffffff, 3 * 1024 * 1024]) });
    // (Starts with a body no decoder accepts: past the size limit, whatever it holds is refused.)
    else if (kind === 'oversized') msg = grpcMessage(Buffer.concat([UNDECODABLE, Buffer.alloc(3 * 1024 * 1024)]));
    else msg = grpcMessage(body);
    if (kind !== 'plain' && compression === 'none') notes.push(kind);
    // Sometimes one message in two writes (two DATA frames).
    if (msg.length > 2 && rand.chance(0.2)) {
      const cut = rand.range(1, msg.length - 1);
      writes.push(msg.subarray(0, cut), msg.subarray(cut));
    } else writes.push(msg);
  }
  if (compression !== 'none') notes.push(`compression=${compression}/${headers['grpc-encoding']}`);
  const resetAfterMs = rand.chance(0.1) ? rand.range(0, 200) : undefined;
  if (resetAfterMs !== undefined) notes.push(`reset@${resetAfterMs}ms`);
  if (!end) notes.push('half-open');
  return { headers, writes, end, resetAfterMs, notes };
}

/** Waits for `ms` (without keeping the process alive). */
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

function h2StreamsCase(rand: Rand, spec: TargetSpec): Case {
  const plans = Array.from({ length: rand.weighted([[6, 1], [3, 2], [1, 5]] as const) }, () => streamPlan(rand, spec));
  const ownTimeout = Math.max(0, ...plans.map((p) => parseInt(String(p.headers['grpc-timeout'] ?? '0')) || 0).filter((t) => t <= 2000));
  return {
    kind: 'grpc-streams',
    describe: `grpc streams: ${plans.map((p) => p.notes.join(' ')).join('; ')}`,
    run: (endpoint, answerMs = ANSWER_MS) =>
      new Promise<CaseResult>((resolve) => {
        const session = http2.connect(`http://${endpoint}`);
        let sessionClosed = false;
        session.on('error', () => {});
        session.on('close', () => {
          sessionClosed = true;
          check();
        });
        const state = plans.map(() => ({ answered: false, done: false, ourReset: false }));
        let settled = false;
        const finish = (outcome: Outcome) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          // Not from inside one of the session's own callbacks: node's http2 client frees
          // nghttp2 state still in use there (the process aborts with heap corruption).
          setImmediate(() => session.destroy());
          resolve({ outcome });
        };
        function check(): void {
          // A stream is settled once the server answered it (its status may come later, or the
          // stream stay half-open until the client ends its side), reset it, or it was ours to reset.
          const open = state.some((s) => !s.done && !s.ourReset && !s.answered);
          if (!open || sessionClosed) finish(state.some((s) => s.answered) ? 'answered' : 'closed');
        }
        const timer = setTimeout(() => finish('hung'), answerMs + ownTimeout);
        plans.forEach((p, i) => {
          const st = state[i]!;
          let req: http2.ClientHttp2Stream;
          try {
            req = session.request(p.headers, { endStream: false });
          } catch {
            st.done = true;
            return;
          }
          req.on('response', () => {
            st.answered = true;
            check();
          });
          req.on('data', () => {});
          req.on('error', () => {});
          req.on('close', () => {
            // A reset from the server answers the stream too.
            if (!st.ourReset && req.rstCode !== undefined && req.rstCode !== 0) st.answered = true;
            st.done = true;
            check();
          });
          void (async () => {
            for (const w of p.writes) {
              if (req.destroyed) return;
              if (!req.write(w)) await Promise.race([new Promise((r) => req.once('drain', r)), sleep(1000)]);
            }
            if (p.resetAfterMs !== undefined) {
              await sleep(p.resetAfterMs);
              st.ourReset = true;
              req.close(http2.constants.NGHTTP2_CANCEL);
              check();
            } else if (p.end && !req.destroyed) req.end();
          })();
        });
      }),
  };
}

/** One case of the kinds both ports share, drawn by `rand`. */
export function sharedCase(rand: Rand, spec: TargetSpec): Case {
  return rand.weighted([
    [5, () => h2StreamsCase(rand, spec)],
    [4, () => rawFramesCase(rand, spec)],
    [1, () => notHttp2Case(rand)],
  ] as const)();
}
