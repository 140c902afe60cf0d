// One HTTP/1.x connection of a fuzz case, its bytes written raw: the plan a case draws, and the
// exchange that writes it and waits for the server (http-cases.ts, console-cases.ts).
import net from 'node:net';
import type { CaseResult } from './cases.js';

export interface Write {
  bytes: Buffer;
  /** Pause before this write (ms). */
  pauseMs: number;
}

export interface Plan {
  kind: string;
  describe: string;
  bytes: Buffer;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

/**
 * Writes on a fresh connection, half-closes `halfCloseMs` after the last write, and waits up to
 * `answerMs` more for the server to close. (A fixed delay, not "once the server is quiet": a
 * watch on the scratch prefix may never be quiet while other cases write there.)
 */
export function exchange(endpoint: string, writes: Write[], halfCloseMs: number, answerMs: number): Promise<{ closed: boolean; received: Buffer }> {
  const [host, port] = endpoint.split(':') as [string, string];
  return new Promise((resolve) => {
    const received: Buffer[] = [];
    let closed = false;
    let timer: NodeJS.Timeout | undefined;
    const socket = net.connect(Number(port), host, () => {
      void (async () => {
        for (const w of writes) {
          if (w.pauseMs) await sleep(w.pauseMs);
          if (socket.destroyed) return;
          socket.write(w.bytes);
        }
        await sleep(halfCloseMs);
        if (!socket.destroyed) socket.end();
        timer = setTimeout(() => socket.destroy(), answerMs);
      })();
    });
    socket.on('data', (d: Buffer) => received.push(d));
    socket.on('end', () => (closed = true));
    socket.on('error', (err: NodeJS.ErrnoException) => (closed ||= err.code === 'ECONNRESET' || err.code === 'EPIPE'));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ closed, received: Buffer.concat(received) });
    });
  });
}

/** A case's outcome from what its exchange saw. */
export function outcomeOf(r: { closed: boolean; received: Buffer }): CaseResult {
  return { outcome: r.closed ? (r.received.length ? 'answered' : 'closed') : 'hung' };
}
