// A connection inside one process: two ends of a byte pipe, for our own gRPC between libraries
// that processes host apart and an embedded node hosts together (the peer agent's Agent
// service, embed/cluster.ts). The same protocol and code as on a Unix socket, with no socket
// file: what one end writes the other reads, in order, on a later tick; ending or destroying
// one end closes the other, as a socket's peer going away does.
import net from 'node:net';
import { Duplex } from 'node:stream';
import type { GrpcServer } from './server.js';
import { StreamChannel, type ChannelOptions } from './stream-channel.js';

class PipeEnd extends Duplex {
  other: PipeEnd | undefined;

  override _read(): void {}

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    const other = this.other;
    if (!other || other.destroyed) return done(new Error('the other end of the pipe is closed'));
    // A later tick, as a socket's read: a writer never re-enters its own reader.
    process.nextTick(() => {
      if (!other.destroyed) other.push(chunk);
    });
    done();
  }

  override _final(done: (err?: Error | null) => void): void {
    const other = this.other;
    process.nextTick(() => other && !other.destroyed && other.push(null));
    done();
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    const other = this.other;
    this.other = undefined;
    if (other && !other.destroyed) process.nextTick(() => other.destroy());
    done(err);
  }

  /** A socket's no-op here: nothing is buffered by Nagle in memory. */
  setNoDelay(): this {
    return this;
  }
}

/** Two connected ends, typed as sockets for the HTTP/2 sessions that read and write them. */
export function memoryPipe(): [net.Socket, net.Socket] {
  // Half-open as a socket is not: an end that ends is closed, like a peer that hung up.
  const a = new PipeEnd({ allowHalfOpen: false });
  const b = new PipeEnd({ allowHalfOpen: false });
  a.other = b;
  b.other = a;
  return [a as unknown as net.Socket, b as unknown as net.Socket];
}

/** A channel whose every connection is a pipe to `server`, in this process. */
export function inProcessChannel(server: GrpcServer, opts?: ChannelOptions): StreamChannel {
  return new StreamChannel(() => {
    const [client, served] = memoryPipe();
    server.inject(served);
    return client;
  }, opts);
}
