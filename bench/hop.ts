// `npm run hop [-- flags]`: what one round trip between two processes costs on this machine,
// by transport (issue 14). A message of a put's size (300 bytes) goes from this process to a
// child over a Unix-domain socket and back, one at a time, as a serial put crosses the
// gateway -> storage hop:
//   grpc-js  a bidi stream of @grpc/grpc-js on both ends (what the storage hop uses today)
//   h2       one node:http2 stream with gRPC's length-prefixed framing, no gRPC library
//   unix     a bare net.Socket with the same framing (the floor for a Node process pair)
// Prints per transport the round trip's median, p90 and p99, each one-way crossing's median
// (both processes stamp the same monotonic clock) and the CPU each side spent per round trip.
// It says how much of a hop a different transport could save.
//
// With --idle-ms N each side sleeps N ms before it sends, so every message reaches a process
// that has been asleep, as each crossing of a serial put does (the writer's next request,
// storage's answer after its fsync). On a VM a sleeping process's vCPU halts, and a crossing
// that wakes it costs more than one between two busy processes; this measures by how much.
import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { MessageReader, frame } from '../shared/grpc/framing.js';
import { percentile } from './stats.js';

const HELP = `Usage: npm run hop -- [flags]

Sends a 300-byte message to a child process over a Unix socket and back, one at a time, over
grpc-js (a bidi stream), a bare node:http2 stream and a bare socket, and prints the round trip
(µs: p50, p90, p99), each one-way crossing's median ("there", "back": both processes stamp
one monotonic clock) and each side's CPU per round trip.

  --round-trips <n>   measured round trips per transport (default 5000; 10 % more as warm-up)
  --transports a,b    which (default grpc-js,h2,unix)
  --idle-ms <n>       each side sleeps n ms before it sends (default 0: it answers at once);
                      the round trip is then the two crossings' sum, without the sleeps
  -h, --help          this text
`;

export const TRANSPORTS = ['grpc-js', 'h2', 'unix'] as const;
type Transport = (typeof TRANSPORTS)[number];

const MESSAGE_BYTES = 300;
/** Where a message carries its send time, and the echo the time it received the request. */
const SENT_AT = 0;
const ECHO_RECEIVED_AT = 8;
/** CLOCK_MONOTONIC in µs: one clock for every process of the machine. */
const nowMicros = () => Number(process.hrtime.bigint()) / 1000;
const identity = (b: Buffer) => b;
const ECHO = {
  Echo: { path: '/kvs.hop.Hop/Echo', requestStream: true, responseStream: true, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity },
};

/** Calls `onMessage` per whole message of a gRPC-framed byte stream (the reader kvs's own ends use). */
function messages(onMessage: (m: Buffer) => void): (chunk: Buffer) => void {
  const reader = new MessageReader(1 << 20, onMessage, () => {
    throw new Error('hop: a message larger than 1 MiB');
  });
  return (chunk) => reader.push(chunk);
}

/** The child: echoes every message on `sock` until the parent disconnects it. */
function serve(transport: Transport, sock: string, idleMs: number): void {
  const ready = () => process.send!('ready');
  // The answer carries when its request arrived and when it leaves.
  const echo = (m: Buffer, write: (m: Buffer) => void) => {
    m.writeDoubleLE(nowMicros(), ECHO_RECEIVED_AT);
    const answer = () => {
      m.writeDoubleLE(nowMicros(), SENT_AT);
      write(m);
    };
    if (idleMs > 0) setTimeout(answer, idleMs);
    else answer();
  };
  if (transport === 'grpc-js') {
    const server = new grpc.Server();
    server.addService(ECHO, { Echo: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => call.on('data', (m: Buffer) => echo(m, (a) => call.write(a))) });
    server.bindAsync(`unix:${sock}`, grpc.ServerCredentials.createInsecure(), ready);
  } else if (transport === 'h2') {
    const server = http2.createServer();
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.on('data', messages((m) => echo(m, (a) => stream.write(frame(a)))));
    });
    server.listen(sock, ready);
  } else {
    net.createServer((c) => {
      c.setNoDelay(true);
      c.on('data', messages((m) => echo(m, (a) => c.write(frame(a)))));
    }).listen(sock, ready);
  }
  process.on('message', (m) => {
    if (m === 'cpu') {
      const u = process.cpuUsage();
      process.send!({ cpuMicros: u.user + u.system });
    }
  });
  process.on('disconnect', () => process.exit(0));
}

/**
 * A client end: `send` writes one message stamped with the time (returned); `onReply` is
 * called per echoed message. One message is in flight at a time, so the buffer is reused.
 */
async function connect(transport: Transport, sock: string, onReply: (m: Buffer) => void): Promise<{ send(): number; close(): void }> {
  const msg = Buffer.alloc(MESSAGE_BYTES, 7);
  const framed = frame(msg);
  const stamp = (b: Buffer, at: number, write: () => void) => {
    const t = nowMicros();
    b.writeDoubleLE(t, at);
    write();
    return t;
  };
  if (transport === 'grpc-js') {
    const Client = grpc.makeGenericClientConstructor(ECHO, 'Hop');
    const client = new Client(`unix:${sock}`, grpc.credentials.createInsecure()) as grpc.Client & Record<string, () => grpc.ClientDuplexStream<Buffer, Buffer>>;
    const call = client.Echo!();
    call.on('data', onReply);
    call.on('error', () => {});
    return { send: () => stamp(msg, SENT_AT, () => call.write(msg)), close: () => (call.cancel(), client.close()) };
  }
  if (transport === 'h2') {
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    const stream = session.request({ ':method': 'POST', ':path': '/kvs.hop.Hop/Echo', 'content-type': 'application/grpc', te: 'trailers' });
    stream.on('data', messages(onReply));
    stream.on('error', () => {});
    return { send: () => stamp(framed, 5 + SENT_AT, () => stream.write(framed)), close: () => (stream.close(), session.close()) };
  }
  const socket = net.connect(sock);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.setNoDelay(true);
  socket.on('data', messages(onReply));
  return { send: () => stamp(framed, 5 + SENT_AT, () => socket.write(framed)), close: () => socket.destroy() };
}

export interface HopResult {
  transport: Transport;
  roundTrips: number;
  p50: number;
  p90: number;
  p99: number;
  /** Medians of the crossing to the echo process and of the one back (µs). */
  thereP50: number;
  backP50: number;
  /** CPU per round trip (µs) of the sending and the echoing process, measured part only. */
  clientCpu: number;
  serverCpu: number;
}

async function measure(transport: Transport, dir: string, roundTrips: number, idleMs: number): Promise<HopResult> {
  const sock = path.join(dir, `${transport}.sock`);
  const child = fork(fileURLToPath(import.meta.url), ['--serve', transport, sock, String(idleMs)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`the ${transport} echo process exited (${code}) before it listened`)));
    });
    const serverCpu = () =>
      new Promise<number>((resolve) => {
        child.once('message', (m) => resolve((m as { cpuMicros: number }).cpuMicros));
        child.send('cpu');
      });
    const there = new Float64Array(roundTrips);
    const back = new Float64Array(roundTrips);
    const micros = new Float64Array(roundTrips);
    let replied: (m: Buffer, at: number) => void = () => {};
    const end = await connect(transport, sock, (m) => replied(m, nowMicros()));
    const once = (i: number) =>
      new Promise<void>((resolve) => {
        let sentAt = 0;
        replied = (m, at) => {
          if (i >= 0) {
            const echoReceived = m.readDoubleLE(ECHO_RECEIVED_AT);
            const echoSent = m.readDoubleLE(SENT_AT);
            there[i] = echoReceived - sentAt;
            back[i] = at - echoSent;
            micros[i] = idleMs > 0 ? there[i]! + back[i]! : at - sentAt;
          }
          resolve();
        };
        const send = () => (sentAt = end.send());
        if (idleMs > 0) setTimeout(send, idleMs);
        else send();
      });
    for (let i = 0; i < Math.ceil(roundTrips / 10); i++) await once(-1);
    const server0 = await serverCpu();
    const client0 = process.cpuUsage();
    for (let i = 0; i < roundTrips; i++) await once(i);
    const client = process.cpuUsage(client0);
    const server = (await serverCpu()) - server0;
    end.close();
    for (const a of [micros, there, back]) a.sort();
    return {
      transport,
      roundTrips,
      p50: percentile(micros, 0.5),
      p90: percentile(micros, 0.9),
      p99: percentile(micros, 0.99),
      thereP50: percentile(there, 0.5),
      backP50: percentile(back, 0.5),
      clientCpu: (client.user + client.system) / roundTrips,
      serverCpu: server / roundTrips,
    };
  } finally {
    child.kill();
  }
}

function format(results: HopResult[]): string {
  const rows = results.map((r) => `| ${r.transport} | ${[r.p50, r.p90, r.p99, r.thereP50, r.backP50, r.clientCpu, r.serverCpu].map((v) => v.toFixed(0)).join(' | ')} |`);
  return ['| transport | p50 µs | p90 µs | p99 µs | there p50 µs | back p50 µs | sender CPU µs | echo CPU µs |', '|---|--:|--:|--:|--:|--:|--:|--:|', ...rows].join('\n');
}

async function main(argv: string[]): Promise<void> {
  if (argv[0] === '--serve') return serve(argv[1] as Transport, argv[2]!, Number(argv[3]));
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: { 'round-trips': { type: 'string' }, transports: { type: 'string' }, 'idle-ms': { type: 'string' }, help: { type: 'boolean', short: 'h' } } }));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${HELP}`);
    process.exitCode = 2;
    return;
  }
  if (values.help) return void process.stdout.write(HELP);
  const roundTrips = Number(values['round-trips'] ?? 5000);
  const idleMs = Number(values['idle-ms'] ?? 0);
  const transports = (values.transports ?? TRANSPORTS.join(',')).split(',');
  const bad = transports.find((t) => !(TRANSPORTS as readonly string[]).includes(t));
  const problem =
    bad !== undefined ? `unknown transport "${bad}" (${TRANSPORTS.join(', ')})`
    : !Number.isInteger(roundTrips) || roundTrips < 10 ? '--round-trips takes a whole number of at least 10'
    : !Number.isInteger(idleMs) || idleMs < 0 ? '--idle-ms takes a whole number of milliseconds, 0 or more'
    : undefined;
  if (problem) {
    process.stderr.write(`${problem}\n\n${HELP}`);
    process.exitCode = 2;
    return;
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-hop-'));
  try {
    const results: HopResult[] = [];
    for (const t of transports as Transport[]) results.push(await measure(t, dir, roundTrips, idleMs));
    process.stdout.write(`${format(results)}\n`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main(process.argv.slice(2));
