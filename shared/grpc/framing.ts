// gRPC's length-prefixed message framing on an HTTP/2 stream (a flag byte, a 4-byte length,
// the message), for both ends of our own gRPC: the client port's server (server.ts) and
// the internal streams' callers (stream-channel.ts).

/** Messages up to this size are copied behind their prefix; larger ones go out as two chunks. */
export const COPY_LIMIT = 16 * 1024;

/** The 5-byte message prefix: flag 0 (not compressed) and the length. */
export function prefix(length: number): Buffer {
  const out = Buffer.allocUnsafe(5);
  out[0] = 0;
  out.writeUInt32BE(length, 1);
  return out;
}

/** A small message with its prefix, in one buffer (one chunk for the HTTP/2 stream). */
export function frame(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}


/** Splits the HTTP/2 DATA stream into gRPC messages. */
export class MessageReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** The length of the message being read, once its 5-byte prefix is in. */
  private need = -1;
  private compressed = false;

  constructor(
    private readonly max: number,
    private readonly onMessage: (msg: Buffer, compressed: boolean) => void,
    private readonly onTooLarge: (size: number) => void,
  ) {}

  push(chunk: Buffer): void {
    // Fast path: a chunk that is exactly one whole message (the usual unary request). Not
    // after a prefix that came alone: then the chunk is (the start of) that message.
    if (this.need < 0 && this.pendingBytes === 0 && chunk.length >= 5) {
      const len = chunk.readUInt32BE(1);
      if (len > this.max) return this.onTooLarge(len);
      if (chunk.length === 5 + len) return this.onMessage(chunk.subarray(5), chunk[0] === 1);
    }
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    for (;;) {
      if (this.need < 0) {
        if (this.pendingBytes < 5) return;
        const head = this.take(5);
        this.compressed = head[0] === 1;
        this.need = head.readUInt32BE(1);
        if (this.need > this.max) {
          this.pending = [];
          this.pendingBytes = 0;
          return this.onTooLarge(this.need);
        }
      }
      if (this.pendingBytes < this.need) return;
      const msg = this.take(this.need);
      this.need = -1;
      this.onMessage(msg, this.compressed);
    }
  }

  private take(n: number): Buffer {
    const all = this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending, this.pendingBytes);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.pending = rest.length ? [rest] : [];
    this.pendingBytes = rest.length;
    return out;
  }
}

/** What a message is written to: an HTTP/2 stream of shared/http2/session.ts. */
export interface MessageSink {
  write(data: Buffer, flushed?: () => void): boolean;
}

/**
 * Writes one message with its prefix; false means "wait for 'drain'", as a Writable's write.
 * `flushed` is called once the message was handed to the socket (not at all if the stream closed).
 */
export function writeMessage(stream: MessageSink, body: Buffer, flushed?: () => void): boolean {
  if (body.length <= COPY_LIMIT) return stream.write(frame(body), flushed);
  // A large message (a Range of many keys, a batch) is not copied again just to prepend 5 bytes.
  stream.write(prefix(body.length));
  return stream.write(body, flushed);
}
