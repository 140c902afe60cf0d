// A loopback TCP proxy that holds every chunk for a fixed time in each direction: what the
// members of a cluster on one machine lack against one spread over machines, a network round
// trip between them (`npm run bench -- --peer-delay <ms>`: each member's peer port is behind
// one, for kvs and etcd alike). Chunks keep their order: timers of one duration fire in the
// order they were set.
import net from 'node:net';

export interface DelayProxy {
  readonly port: number;
  close(): Promise<void>;
}

/** Listens on a free loopback port and forwards each connection to 127.0.0.1:`target`. */
export async function startDelayProxy(target: number, delayMs: number): Promise<DelayProxy> {
  const sockets = new Set<net.Socket>();
  const pipe = (from: net.Socket, to: net.Socket) => {
    from.on('data', (chunk) => setTimeout(() => to.destroyed || to.write(chunk), delayMs));
    from.on('end', () => setTimeout(() => to.end(), delayMs));
    from.on('error', () => to.destroy());
    from.on('close', () => setTimeout(() => to.destroy(), delayMs));
  };
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    for (const s of [client, upstream]) {
      s.setNoDelay(true);
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    }
    pipe(client, upstream);
    pipe(upstream, client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
