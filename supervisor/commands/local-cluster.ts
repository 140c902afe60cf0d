// `kvs local-cluster`: a cluster of N nodes on this machine for trying cluster mode out. Each
// node is an ordinary `kvs run` (its own supervisor, data directory and log file), all sharing
// one local-directory object store; Ctrl-C stops them all (the leader hands over first).
import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const KVS_BIN = fileURLToPath(new URL('../../../bin/kvs.js', import.meta.url));

export interface LocalClusterOptions {
  nodes: number;
  dir: string;
  basePort: number;
  /** Flags passed on to every node's `kvs run`. */
  extra: string[];
}

export async function localCluster(o: LocalClusterOptions): Promise<void> {
  if (!Number.isInteger(o.nodes) || o.nodes < 1 || o.nodes > 9) throw new Error(`--nodes must be 1 to 9, got ${o.nodes}`);
  if (!Number.isInteger(o.basePort) || o.basePort < 1 || o.basePort + 10 * o.nodes > 65535) throw new Error(`--base-port ${o.basePort} is out of range`);
  const dir = path.resolve(o.dir);
  fs.mkdirSync(dir, { recursive: true });
  const children: ChildProcess[] = [];
  const endpoints: string[] = [];
  for (let i = 1; i <= o.nodes; i++) {
    const client = `127.0.0.1:${o.basePort + 10 * (i - 1)}`;
    const peer = `127.0.0.1:${o.basePort + 10 * (i - 1) + 1}`;
    endpoints.push(client);
    const log = fs.openSync(path.join(dir, `n${i}.log`), 'a');
    const args = [
      KVS_BIN, 'run', '--node-id', `n${i}`, '--data-dir', path.join(dir, `n${i}`), '--listen', client, '--peer-listen', peer,
      '--s3-endpoint', `file://${path.join(dir, 'objects')}`, '--s3-bucket', 'local', '--s3-prefix', 'cluster/', '--log-format', 'json', ...o.extra,
    ];
    const child = spawn(process.execPath, args, { stdio: ['ignore', log, log] });
    children.push(child);
    process.stdout.write(`n${i}: client ${client}, peer ${peer}, data ${path.join(dir, `n${i}`)}, log ${path.join(dir, `n${i}.log`)}\n`);
  }
  process.stdout.write(
    `\nTry:  ETCDCTL_API=3 etcdctl --endpoints=${endpoints.join(',')} endpoint status -w table\n` +
      `      ETCDCTL_API=3 etcdctl --endpoints=${endpoints[endpoints.length - 1]} put hello world\n` +
      'Ctrl-C stops every node.\n',
  );
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    for (const c of children) c.kill('SIGTERM');
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  const exits = children.map((c, i) => new Promise<void>((resolve) => c.on('exit', (code, signal) => {
    if (!stopping) process.stderr.write(`n${i + 1} exited (${signal ?? `code ${code}`}); see its log\n`);
    resolve();
  })));
  await Promise.all(exits);
}
