// The command line of a one-member etcd 3.4 on loopback, used by the tests and the benchmark.

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
