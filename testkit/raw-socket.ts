// Raw TCP exchanges with a server port: bytes in, whatever comes back until the server closes
// the connection or a deadline passes. Used by the fuzzers for broken framing (which no HTTP/2
// client library will send) and by integration/bad-input.test.ts.
import net from 'node:net';

export interface RawResult {
  /** The server closed the connection (end or reset) before the deadline. */
  closed: boolean;
  received: Buffer;
}

/**
 * Writes `bytes` (a list: one write each) on a fresh TCP connection and collects the answer
 * until the server closes the connection, or `timeoutMs` passes (then it is destroyed and
 * `closed` is false). `halfClose`: true half-closes the connection right after the writes; a
 * number half-closes it once the server has been silent that many ms after them.
 */
export function rawExchange(endpoint: string, bytes: Buffer | Buffer[], halfClose: boolean | number = false, timeoutMs = 5000): Promise<RawResult> {
  const [host, port] = endpoint.split(':') as [string, string];
  const writes = Array.isArray(bytes) ? bytes : [bytes];
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let quiet: NodeJS.Timeout | undefined;
    const endWhenQuiet = () => {
      if (typeof halfClose !== 'number') return;
      clearTimeout(quiet);
      quiet = setTimeout(() => socket.end(), halfClose);
    };
    const socket = net.connect(Number(port), host, () => {
      for (const w of writes) if (!socket.destroyed) socket.write(w);
      if (halfClose === true && !socket.destroyed) socket.end();
      endWhenQuiet();
    });
    let closed = false;
    const timer = setTimeout(() => socket.destroy(), timeoutMs);
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      endWhenQuiet();
    });
    socket.on('end', () => (closed = true));
    socket.on('error', (err: NodeJS.ErrnoException) => (closed ||= err.code === 'ECONNRESET' || err.code === 'EPIPE'));
    socket.on('close', () => {
      clearTimeout(timer);
      clearTimeout(quiet);
      resolve({ closed, received: Buffer.concat(chunks) });
    });
  });
}

/** One HTTP/2 frame as the server sent it (payload not decoded). */
export interface ReceivedFrame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

/** The complete HTTP/2 frames in `buf` (9-byte headers: length, type, flags, stream). */
export function http2Frames(buf: Buffer): ReceivedFrame[] {
  const frames: ReceivedFrame[] = [];
  for (let off = 0; off + 9 <= buf.length; ) {
    const len = buf.readUIntBE(off, 3);
    if (off + 9 + len > buf.length) break;
    frames.push({ type: buf[off + 3]!, flags: buf[off + 4]!, stream: buf.readUInt32BE(off + 5) & 0x7fffffff, payload: buf.subarray(off + 9, off + 9 + len) });
    off += 9 + len;
  }
  return frames;
}

/** HTTP/2 frame types in `buf`. */
export function http2FrameTypes(buf: Buffer): number[] {
  return http2Frames(buf).map((f) => f.type);
}
