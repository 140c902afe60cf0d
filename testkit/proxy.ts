// A loopback TCP proxy the chaos harness puts in front of a port (a node's peer or client port,
// the object store), and turns into a fault on demand:
//   pass    forward both ways (connections that were held by `hang` go through now)
//   refuse  reset every existing connection and every new one at once (RST, as a dead host's
//           kernel answers)
//   hang    a black hole: new connections are accepted and nothing is read from them; existing
//           ones stop forwarding in both directions (what is in flight stays in the kernel's
//           buffers, as unacknowledged TCP segments would, and flows on after a heal)
// The mode can be set for all connections or per source, where a source is the node (process
// tree) that opened the connection, found through /proc (owner.ts). That is how one follower is
// cut from the leader while the other is not: every follower dials the same advertised address.
// With `delayMs` it also holds every chunk that long in each direction: a network between
// machines for members that share one (the bench's --peer-delay).
import net from 'node:net';
import { Transform } from 'node:stream';
import { owningTree } from './owner.js';

export type ProxyMode = 'pass' | 'refuse' | 'hang';
export const PROXY_MODES: readonly ProxyMode[] = ['pass', 'refuse', 'hang'];

export interface ProxyOptions {
  /** For messages. */
  readonly name: string;
  /** The port behind the proxy on 127.0.0.1 (read at each connection: a node keeps its port across restarts). */
  readonly target: () => number;
  /**
   * The nodes that may open connections, as supervisor pid → name; enables per-source modes.
   * Read when a connection is identified (a restarted node has a new pid).
   */
  readonly sources?: () => ReadonlyMap<number, string>;
  /** Hold each chunk this long (ms) in each direction while passing; chunks keep their order. */
  readonly delayMs?: number;
}

/** Passes every chunk on `ms` later (timers of one duration fire in the order they were set). */
function delayed(ms: number): Transform {
  return new Transform({
    transform(chunk, _encoding, done) {
      setTimeout(() => this.push(chunk), ms);
      done();
    },
    flush(done) {
      setTimeout(done, ms); // after the last chunk's timer
    },
  });
}

interface Conn {
  readonly client: net.Socket;
  readonly remotePort: number | undefined;
  /** The node that opened it, once identified. */
  source: string | undefined;
  upstream?: net.Socket;
  flowing: boolean;
}

export class TcpProxy {
  private server: net.Server | undefined;
  private readonly conns = new Set<Conn>();
  private defaultMode: ProxyMode = 'pass';
  private readonly bySource = new Map<string, ProxyMode>();
  /** Connections accepted, and how many of them were identified (for the report). */
  accepted = 0;
  identified = 0;

  constructor(private readonly opts: ProxyOptions) {}

  get name(): string {
    return this.opts.name;
  }

  /** Listens on 127.0.0.1 (`port`, or a free one); resolves with the port. */
  async start(port = 0): Promise<number> {
    const server = net.createServer({ pauseOnConnect: true, noDelay: true }, (s) => this.accept(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.server = server;
    return this.port;
  }

  get port(): number {
    return (this.server!.address() as net.AddressInfo).port;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Sets the mode of every source (and forgets per-source modes). */
  set(mode: ProxyMode): void {
    this.defaultMode = mode;
    this.bySource.clear();
    this.reapply();
  }

  /** Sets the mode of connections opened by one node. */
  setFor(source: string, mode: ProxyMode): void {
    this.bySource.set(source, mode);
    this.reapply();
  }

  /** Everything passes again. */
  heal(): void {
    this.set('pass');
  }

  async close(): Promise<void> {
    for (const c of this.conns) this.drop(c);
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private modeOf(c: Conn): ProxyMode {
    return (c.source !== undefined ? this.bySource.get(c.source) : undefined) ?? this.defaultMode;
  }

  private accept(client: net.Socket): void {
    this.accepted++;
    const c: Conn = { client, remotePort: client.remotePort, source: undefined, flowing: false };
    this.identify(c);
    this.conns.add(c);
    client.on('error', () => this.drop(c));
    client.on('close', () => this.drop(c));
    this.apply(c);
  }

  /**
   * Finds the node that opened `c`. Tried at accept and again before a mode change: a node
   * dials its peers while it starts, before the harness knows its pid.
   */
  private identify(c: Conn): void {
    const sources = this.opts.sources?.();
    if (c.source !== undefined || !sources || sources.size === 0 || c.remotePort === undefined) return;
    const root = owningTree(c.remotePort, this.port, [...sources.keys()]);
    c.source = root !== undefined ? sources.get(root) : undefined;
    if (c.source !== undefined) this.identified++;
  }

  private reapply(): void {
    for (const c of this.conns) {
      this.identify(c);
      this.apply(c);
    }
  }

  private apply(c: Conn): void {
    const mode = this.modeOf(c);
    if (mode === 'refuse') return this.drop(c);
    if (mode === 'hang') return this.stall(c);
    if (!c.upstream) return this.connect(c);
    this.flow(c);
  }

  private connect(c: Conn): void {
    const upstream = net.connect({ port: this.opts.target(), host: '127.0.0.1', noDelay: true });
    c.upstream = upstream;
    upstream.pause();
    // The target refusing (a killed node) is passed on to the client as a reset.
    upstream.on('error', () => this.drop(c));
    upstream.on('close', () => this.drop(c));
    upstream.once('connect', () => {
      if (this.modeOf(c) === 'pass') this.flow(c);
    });
  }

  private flow(c: Conn): void {
    const up = c.upstream!;
    if (c.flowing || up.connecting || up.destroyed) return;
    c.flowing = true;
    const d = this.opts.delayMs;
    if (d) {
      c.client.pipe(delayed(d)).pipe(up);
      up.pipe(delayed(d)).pipe(c.client);
    } else {
      c.client.pipe(up);
      up.pipe(c.client);
    }
    c.client.resume();
    up.resume();
  }

  private stall(c: Conn): void {
    if (!c.flowing) {
      c.client.pause();
      return;
    }
    c.flowing = false;
    // What a delay holds already is on the wire, and arrives.
    c.client.unpipe();
    c.upstream!.unpipe();
    c.client.pause();
    c.upstream!.pause();
  }

  private drop(c: Conn): void {
    if (!this.conns.delete(c)) return;
    if (!c.client.destroyed) c.client.resetAndDestroy();
    if (c.upstream && !c.upstream.destroyed) c.upstream.resetAndDestroy();
  }
}
