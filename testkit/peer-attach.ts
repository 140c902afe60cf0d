// Test support for the peer agent's units: its Attach service on a Unix socket, and the
// storage end of it, as services/peer/main.ts and services/storage/peer-attach.ts run them.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';
import type { MethodDefinition } from '@grpc/grpc-js';
import { service } from '../shared/proto/index.js';
import { GrpcServer, type ServerCall } from '../shared/grpc/server.js';
import { UnixStreamChannel, type H2Stream } from '../shared/grpc/stream-channel.js';
import { bindUnix } from '../shared/grpc/plumbing.js';
import type { StorageSide } from '../services/peer/storage-side.js';

/** What the agent sends storage, as far as these tests read it. */
export interface AgentMessage {
  role?: { role: number; term: number; dropStaged?: boolean };
  replicated?: { through: unknown; uploadFirst: boolean; code: number; message: string };
}

export const ATTACH = service('kvs.peer.Agent').Attach as MethodDefinition<object, AgentMessage>;

/** The peer agent's Attach served on a Unix socket; the socket's path. */
export async function agentSocket(t: TestContext, side: StorageSide): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-attach-'));
  const socket = path.join(dir, 'peer.sock');
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  server.addService(service('kvs.peer.Agent'), { Attach: (call: ServerCall<any, unknown>) => side.serve(call) });
  await bindUnix(server, socket);
  t.after(async () => {
    await server.shutdown(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return socket;
}

/** Storage's end of the Attach stream to `side` (on a socket of its own), before its hello. */
export async function storageEnd(t: TestContext, side: StorageSide): Promise<H2Stream<object, AgentMessage>> {
  const channel = new UnixStreamChannel(await agentSocket(t, side));
  t.after(() => channel.close());
  const stream = channel.stream(ATTACH);
  stream.on('error', () => {});
  return stream;
}
