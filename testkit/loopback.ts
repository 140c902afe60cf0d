// Loopback helpers shared by the tests and the benchmark, free of side effects on import:
// free ports, and the command line of a one-member etcd 3.4.
import net from 'node:net';

/** `n` distinct free ports (all listeners are held open together, then closed). */
export async function freePorts(n: number): Promise<number[]> {
  const servers: net.Server[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const srv = net.createServer();
      servers.push(srv);
      await new Promise<void>((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(0, '127.0.0.1', () => resolve());
      });
    }
    return servers.map((s) => (s.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
}


export function etcdArgs(name: string, dataDir: string, clientPort: number, peerPort: number): string[] {
  const clientUrl = `http://127.0.0.1:${clientPort}`;
  const peerUrl = `http://127.0.0.1:${peerPort}`;
  return [
    `--name=${name}`,
    `--data-dir=${dataDir}`,
    `--listen-client-urls=${clientUrl}`,
    `--advertise-client-urls=${clientUrl}`,
    `--listen-peer-urls=${peerUrl}`,
    `--initial-advertise-peer-urls=${peerUrl}`,
    `--initial-cluster=${name}=${peerUrl}`,
    `--initial-cluster-token=${name}`,
    '--initial-cluster-state=new',
    '--logger=zap',
    '--log-outputs=stderr',
  ];
}
