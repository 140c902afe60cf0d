// gRPC plumbing shared by every process: unix-socket servers for the internal services.
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { GrpcServer } from './server.js';

/** Binds a server on a unix socket, replacing a stale socket file left by a crashed process. */
export async function bindUnix(server: grpc.Server | GrpcServer, socket: string): Promise<void> {
  fs.mkdirSync(path.dirname(socket), { recursive: true });
  if (Buffer.byteLength(socket) > 107) {
    throw new Error(`socket path ${socket} is longer than the 107 bytes unix sockets allow; use a shorter --data-dir`);
  }
  fs.rmSync(socket, { force: true });
  if (server instanceof GrpcServer) {
    await server.listen(`unix:${socket}`);
    return;
  }
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );
}

/** Stops a server: lets calls finish for up to `graceMs`, then cuts the rest. */
export function shutdown(server: grpc.Server | GrpcServer, graceMs = 5000): Promise<void> {
  if (server instanceof GrpcServer) return server.shutdown(graceMs);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    timer.unref();
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * The open long-lived streams of a service (lease keep-alives, election observers). A stop
 * ends them at once with UNAVAILABLE, which clients answer by reconnecting, instead of the
 * server's grace period waiting for streams that never end by themselves.
 */
/** What OpenStreams needs of a server stream (grpc-js's or the client port's ServerCall). */
interface EndableStream {
  on(event: string, listener: () => void): unknown;
  emit(event: 'error', status: { code: number; details: string }): unknown;
}

export class OpenStreams {
  private readonly calls = new Set<EndableStream>();

  add(call: EndableStream): void {
    this.calls.add(call);
    call.on('close', () => this.calls.delete(call));
    call.on('error', () => this.calls.delete(call));
  }

  endAll(details: string): void {
    for (const call of this.calls) call.emit('error', { code: grpc.status.UNAVAILABLE, details });
    this.calls.clear();
  }
}

/** Unix-socket channels carry large internal messages (snapshots, batches). */
export const INTERNAL_CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
  // A restarted component is back within a second or two; grpc's default backoff (1 s
  // growing to 120 s) would leave callers waiting long after it is.
  'grpc.initial_reconnect_backoff_ms': 50,
  'grpc.max_reconnect_backoff_ms': 1000,
};
