// One node per data directory, with a lock the kernel releases when its holder dies.
//
// The lock is a Linux abstract-namespace unix socket named from the data directory's identity
// (`\0kvs/data-dir/<sha256 of its device and inode numbers>`, so a symlink or a bind mount of the
// same directory names the same lock): binding it is atomic, EADDRINUSE means another
// process holds it, and it exists only as long as a descriptor of it is open. So a node killed
// with `kill -9` (even one still a zombie, not yet reaped by its parent) no longer holds it,
// and nothing is left behind to clean up. The holder answers a connection with its pid, so a
// refused start can name it. `run/kvs.pid` is still written, for operators only: nothing reads it
// to decide anything.
//
// Limits: abstract sockets belong to a network namespace, so two nodes in different network
// namespaces (containers sharing a volume) do not see each other's lock. As a second check, a
// start is also refused while `run/ctl.sock` answers (a live supervisor: one in another
// namespace, or one of a kvs without this lock). Abstract names carry no file permissions:
// another local user who can stat the directory could bind its name first and so keep kvs from
// starting there (the refusal then names that process's pid); it cannot take a running node's.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** How long a refused claimant waits for the holder to say its pid. */
const HOLDER_ANSWER_MS = 2000;
/** Bind attempts: another one follows only when the holder vanished in between. */
const ATTEMPTS = 50;

/** The data directory is in use: `kvs run` reports the message and exits non-zero. */
export class DataDirHeldError extends Error {
  constructor(
    readonly dataDir: string,
    readonly holderPid: number | undefined,
    why = '',
  ) {
    super(`another kvs${holderPid ? ` (pid ${holderPid})` : ''} is running on data directory ${dataDir}${why}`);
    this.name = 'DataDirHeldError';
  }
}

const held = new Map<string, net.Server>();

/** The lock's name: an abstract socket (leading NUL) named from the directory's identity. */
export function lockName(dataDir: string): string {
  const st = fs.statSync(dataDir, { bigint: true });
  return `\0kvs/data-dir/${createHash('sha256').update(`${st.dev}:${st.ino}`).digest('hex')}`;
}

/**
 * Claims `dataDir` for this process until releaseDataDir or its exit (however it exits).
 * Rejects with DataDirHeldError when another live process holds it.
 */
export async function claimDataDir(dataDir: string): Promise<void> {
  if (held.has(dataDir)) return;
  const runDir = path.join(dataDir, 'run');
  fs.mkdirSync(runDir, { recursive: true });
  const name = lockName(dataDir);
  for (let attempt = 1; ; attempt++) {
    const server = await bindAbstract(name);
    if (server) {
      const ctl = await answers(path.join(runDir, 'ctl.sock'));
      if (ctl) {
        server.close();
        throw new DataDirHeldError(dataDir, pidFile(runDir), ` (its ${path.join(runDir, 'ctl.sock')} answers)`);
      }
      server.unref();
      held.set(dataDir, server);
      writePidFile(runDir);
      return;
    }
    const holder = await askHolder(name);
    if (holder !== 'gone') throw new DataDirHeldError(dataDir, holder ?? pidFile(runDir));
    // The holder closed the lock between our bind and our question (it just died or stopped):
    // try again. Bounded, in case of a storm of claimants.
    if (attempt >= ATTEMPTS) throw new DataDirHeldError(dataDir, pidFile(runDir), ' (it keeps being claimed and released)');
  }
}

/** Gives the claim up (the kernel would at exit anyway) and removes run/kvs.pid if it is ours. */
export function releaseDataDir(dataDir: string): void {
  const server = held.get(dataDir);
  if (!server) return;
  held.delete(dataDir);
  server.close();
  const file = path.join(dataDir, 'run', 'kvs.pid');
  try {
    if (Number(fs.readFileSync(file, 'utf8')) === process.pid) fs.rmSync(file);
  } catch {}
}

/**
 * Listens on the abstract socket `name` (a lock: the data directory's here, a test's port in
 * testkit/harness.ts); undefined when someone else holds it (EADDRINUSE). A connection is
 * told the holder's pid.
 */
export function bindAbstract(name: string): Promise<net.Server | undefined> {
  return new Promise((resolve, reject) => {
    // Whoever connects learns the holder's pid; nothing else is read or sent.
    const server = net.createServer((conn) => {
      conn.on('error', () => {});
      conn.end(`${process.pid}\n`);
    });
    server.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(undefined) : reject(err)));
    server.listen(name, () => {
      server.removeAllListeners('error');
      server.on('error', () => {});
      resolve(server);
    });
  });
}

/**
 * Asks the lock's holder for its pid: the pid, undefined if it accepted but did not say in
 * time (busy or hung: still a holder), or 'gone' if the lock is no longer bound.
 */
function askHolder(name: string): Promise<number | undefined | 'gone'> {
  return new Promise((resolve) => {
    let text = '';
    let connected = false;
    const conn = net.connect(name);
    const done = (v: number | undefined | 'gone') => {
      clearTimeout(timer);
      conn.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(undefined), HOLDER_ANSWER_MS);
    conn.setEncoding('utf8');
    conn.on('connect', () => (connected = true));
    conn.on('data', (d: string) => (text += d));
    conn.on('end', () => {
      const pid = Number(text.trim());
      // Closed without a word: it was accepted by a socket that its process closed (it died).
      done(Number.isSafeInteger(pid) && pid > 0 ? pid : 'gone');
    });
    conn.on('error', (err: NodeJS.ErrnoException) => {
      // Refused: nobody listens any more. Reset after connecting: the holder died meanwhile.
      if (err.code === 'ECONNREFUSED' || err.code === 'ENOENT' || connected || err.code === 'ECONNRESET') done('gone');
      else done(undefined);
    });
  });
}

/** Does a server answer on this unix socket path? */
function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const conn = net.connect(socket);
    const done = (v: boolean) => {
      clearTimeout(timer);
      conn.destroy();
      resolve(v);
    };
    // A full backlog on a live server: EAGAIN, handled below; this only bounds the wait.
    const timer = setTimeout(() => done(false), HOLDER_ANSWER_MS);
    conn.on('connect', () => done(true));
    conn.on('error', (err: NodeJS.ErrnoException) => done(err.code === 'EAGAIN'));
  });
}

function pidFile(runDir: string): number | undefined {
  try {
    const pid = Number(fs.readFileSync(path.join(runDir, 'kvs.pid'), 'utf8'));
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** run/kvs.pid, for operators (`kill $(cat run/kvs.pid)`); written whole (rename). */
function writePidFile(runDir: string): void {
  const tmp = path.join(runDir, `kvs.pid.${process.pid}.tmp`);
  fs.writeFileSync(tmp, `${process.pid}\n`);
  fs.renameSync(tmp, path.join(runDir, 'kvs.pid'));
}
