// `npm run hop [-- flags]`: what one round trip between two processes costs on this machine,
// by transport (issue 14). A message of a put's size (300 bytes) goes from this process to a
// child over a Unix-domain socket and back, one at a time, as a serial put crosses the
// gateway -> storage hop:
//   grpc-js  a bidi stream of @grpc/grpc-js on both ends (what the storage hop uses today)
//   h2       one node:http2 stream with gRPC's length-prefixed framing, no gRPC library
//   unix     a bare net.Socket with the same framing (the floor for a Node process pair)
// Prints per transport the round trip's median, p90 and p99 and the CPU each side spent per
// round trip. It says how much of a hop a different transport could save.
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
(µs: p50, p90, p99) and each side's CPU per round trip.

  --round-trips <n>   measured round trips per transport (default 5000; 10 % more as warm-up)
  --transports a,b    which (default grpc-js,h2,unix)
  -h, --help          this text
`;

export const TRANSPORTS = ['grpc-js', 'h2', 'unix'] as const;
type Transport = (typeof TRANSPORTS)[number];

const MESSAGE_BYTES = 300;
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
function serve(transport: Transport, sock: string): void {
  const ready = () => process.send!('ready');
  if (transport === 'grpc-js') {
    const server = new grpc.Server();
    server.addService(ECHO, { Echo: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => call.on('data', (m: Buffer) => call.write(m)) });
    server.bindAsync(`unix:${sock}`, grpc.ServerCredentials.createInsecure(), ready);
  } else if (transport === 'h2') {
    const server = http2.createServer();
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.on('data', messages((m) => stream.write(frame(m))));
    });
    server.listen(sock, ready);
  } else {
    net.createServer((c) => {
      c.setNoDelay(true);
      c.on('data', messages((m) => c.write(frame(m))));
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

/** A client end: `send` writes one message; `onReply` is called per echoed message. */
async function connect(transport: Transport, sock: string, onReply: () => void): Promise<{ send(): void; close(): void }> {
  const msg = Buffer.alloc(MESSAGE_BYTES, 7);
  const framed = frame(msg);
  if (transport === 'grpc-js') {
    const Client = grpc.makeGenericClientConstructor(ECHO, 'Hop');
    const client = new Client(`unix:${sock}`, grpc.credentials.createInsecure()) as grpc.Client & Record<string, () => grpc.ClientDuplexStream<Buffer, Buffer>>;
    const call = client.Echo!();
    call.on('data', onReply);
    call.on('error', () => {});
    return { send: () => call.write(msg), close: () => (call.cancel(), client.close()) };
  }
  if (transport === 'h2') {
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    const stream = session.request({ ':method': 'POST', ':path': '/kvs.hop.Hop/Echo', 'content-type': 'application/grpc', te: 'trailers' });
    stream.on('data', messages(onReply));
    stream.on('error', () => {});
    return { send: () => stream.write(framed), close: () => (stream.close(), session.close()) };
  }
  const socket = net.connect(sock);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.setNoDelay(true);
  socket.on('data', messages(onReply));
  return { send: () => socket.write(framed), close: () => socket.destroy() };
}

export interface HopResult {
  transport: Transport;
  roundTrips: number;
  p50: number;
  p90: number;
  p99: number;
  /** CPU per round trip (µs) of the sending and the echoing process, measured part only. */
  clientCpu: number;
  serverCpu: number;
}

async function measure(transport: Transport, dir: string, roundTrips: number): Promise<HopResult> {
  const sock = path.join(dir, `${transport}.sock`);
  const child = fork(fileURLToPath(import.meta.url), ['--serve', transport, sock], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
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
    let replied: () => void = () => {};
    const end = await connect(transport, sock, () => replied());
    const once = () =>
      new Promise<void>((resolve) => {
        replied = resolve;
        end.send();
      });
    for (let i = 0; i < Math.ceil(roundTrips / 10); i++) await once();
    const server0 = await serverCpu();
    const client0 = process.cpuUsage();
    const micros = new Float64Array(roundTrips);
    for (let i = 0; i < roundTrips; i++) {
      const t0 = process.hrtime.bigint();
      await once();
      micros[i] = Number(process.hrtime.bigint() - t0) / 1000;
    }
    const client = process.cpuUsage(client0);
    const server = (await serverCpu()) - server0;
    end.close();
    micros.sort((a, b) => a - b);
    return {
      transport,
      roundTrips,
      p50: percentile(micros, 0.5),
      p90: percentile(micros, 0.9),
      p99: percentile(micros, 0.99),
      clientCpu: (client.user + client.system) / roundTrips,
      serverCpu: server / roundTrips,
    };
  } finally {
    child.kill();
  }
}

function format(results: HopResult[]): string {
  const rows = results.map((r) => `| ${r.transport} | ${r.p50.toFixed(0)} | ${r.p90.toFixed(0)} | ${r.p99.toFixed(0)} | ${r.clientCpu.toFixed(0)} | ${r.serverCpu.toFixed(0)} |`);
  return ['| transport | p50 µs | p90 µs | p99 µs | sender CPU µs | echo CPU µs |', '|---|--:|--:|--:|--:|--:|', ...rows].join('\n');
}

async function main(argv: string[]): Promise<void> {
  if (argv[0] === '--serve') return serve(argv[1] as Transport, argv[2]!);
  const { values } = parseArgs({ args: argv, options: { 'round-trips': { type: 'string' }, transports: { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) return void process.stdout.write(HELP);
  const roundTrips = Number(values['round-trips'] ?? 5000);
  const transports = (values.transports ?? TRANSPORTS.join(',')).split(',');
  const bad = transports.find((t) => !(TRANSPORTS as readonly string[]).includes(t));
  if (!Number.isInteger(roundTrips) || roundTrips < 10 || bad !== undefined) {
    process.stderr.write(`${bad !== undefined ? `unknown transport "${bad}" (${TRANSPORTS.join(', ')})` : '--round-trips takes a whole number of at least 10'}\n\n${HELP}`);
    process.exitCode = 2;
    return;
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-hop-'));
  try {
    const results: HopResult[] = [];
    for (const t of transports as Transport[]) results.push(await measure(t, dir, roundTrips));
    process.stdout.write(`${format(results)}\n`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main(process.argv.slice(2));
