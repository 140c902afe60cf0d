// A real S3 server for tests: Ceph's RADOS Gateway on loopback (Debian's ceph-mon, ceph-osd,
// radosgw; `.ci/run` installs them). One monitor, one in-memory OSD (memstore) and radosgw,
// all in a temp dir on free ports, cephx off. About 2 s to start and 110 MB of memory, so
// share one server among the tests of a file (`startS3Server(fileScope)`).
//
//   const s3 = await startS3Server(fileScope);
//   const bucket = await s3.createBucket({ versioned: true });
//   const store = await openObjectStore(s3.storeOptions(bucket, 'prefix/'));
//   // a kvs node: startKvs(t, { args: s3.kvsArgs(bucket, 'prefix/'), env: s3.env })
//   await s3.stopGateway(); ... await s3.startGateway(); // "the store is down", same port and data
//
// The settings (crc messenger modes, fast paxos, single-OSD pools, tcp_nodelay) are the ones
// measured in the project's S3 test-server notes; without them radosgw hangs or crawls.

import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { CreateBucketCommand, PutBucketVersioningCommand, S3Client } from '@aws-sdk/client-s3';
import type { ObjectStoreOptions } from '../shared/objectstore/index.js';
import { freePorts } from './loopback.js';
import { runCommand, startProcess, tempDir, type Ctx, type ServerProcess } from './process.js';

export interface S3TestServer {
  /** http://127.0.0.1:PORT */
  readonly endpoint: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** Credentials as kvs reads them (KVS_S3_*), plus the SDK's region. */
  readonly env: Record<string, string>;
  /** Creates a bucket (a fresh name unless given); versioning is enabled before any write. */
  createBucket(opts?: { name?: string; versioned?: boolean }): Promise<string>;
  /** Options for openObjectStore on this server. */
  storeOptions(bucket: string, prefix: string, encryptionKey?: Buffer): ObjectStoreOptions;
  /** The object-store flags of a kvs command or node on this server. */
  kvsArgs(bucket: string, prefix: string): string[];
  /** Stops radosgw only: S3 requests fail until startGateway(); the stored objects stay. */
  stopGateway(): Promise<void>;
  /** Starts radosgw again on the same port, over the same data. */
  startGateway(): Promise<void>;
  /** Stops everything (also done when the owning test or file ends). */
  stop(): Promise<void>;
}

const CEPH_TIMEOUT_MS = 60_000;

/**
 * `n` consecutive free ports (for the OSD's messenger range), checked by binding them, none of
 * them in `avoid`: ports already chosen for the monitor and radosgw are free until those bind,
 * and an OSD that took radosgw's would answer the S3 client ("Parse Error: Expected HTTP/").
 */
async function freePortRange(n: number, avoid: number[]): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    if (avoid.some((p) => p >= base && p < base + n)) continue;
    const servers: net.Server[] = [];
    try {
      for (let p = base; p < base + n; p++) {
        const srv = net.createServer();
        servers.push(srv);
        await new Promise<void>((resolve, reject) => {
          srv.once('error', reject);
          srv.listen(p, '127.0.0.1', () => resolve());
        });
      }
      return base;
    } catch {
      // taken: try another range
    } finally {
      await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    }
  }
  throw new Error(`no ${n} consecutive free ports found`);
}

function cephConf(dir: string, fsid: string, monPort: number, rgwPort: number, osdPorts: number): string {
  return `[global]
fsid = ${fsid}
mon host = 127.0.0.1:${monPort}
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
ms_client_mode = crc
paxos_propose_interval = 0.05
paxos_min_wait = 0.01
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_autoscale_mode = off
ms_bind_port_min = ${osdPorts}
ms_bind_port_max = ${osdPorts + 15}
client_mount_timeout = 30
run dir = ${dir}/run
log file = ${dir}/log/$name.log
admin socket = ${dir}/run/$name.asok
pid file = ${dir}/run/$name.pid
mon data = ${dir}/mon/$name
osd data = ${dir}/osd/$name
osd objectstore = memstore
[client.rgw.a]
rgw_frontends = beast endpoint=127.0.0.1:${rgwPort} tcp_nodelay=1
rgw data = ${dir}/rgw
`;
}

async function ceph(conf: string, file: string, args: string[]): Promise<string> {
  const r = await runCommand(file, ['-c', conf, ...args], { timeoutMs: CEPH_TIMEOUT_MS });
  if (r.exitCode !== 0) throw new Error(`${file} ${args.join(' ')} failed (exit ${r.exitCode}):\n${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Resolves once something accepts connections on the port; rejects if `proc` exits first. */
async function waitForPort(port: number, proc: ServerProcess, what: string): Promise<void> {
  const deadline = Date.now() + CEPH_TIMEOUT_MS;
  let exited = false;
  void proc.exited.then(() => (exited = true));
  for (let delay = 10; ; delay = Math.min(delay * 2, 200)) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = net.connect(port, '127.0.0.1');
      sock.once('connect', () => {
        sock.destroy();
        resolve(true);
      });
      sock.once('error', () => resolve(false));
    });
    if (ok) return;
    if (exited) throw new Error(`${what} exited before listening on ${port}:\n${proc.output()}`);
    if (Date.now() > deadline) throw new Error(`${what} not listening on ${port} after ${CEPH_TIMEOUT_MS} ms:\n${proc.output()}`);
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

/** Start a monitor, an OSD and radosgw in a temp dir; stopped and removed when `t` ends. */
export async function startS3Server(t: Ctx): Promise<S3TestServer> {
  const dir = await tempDir(t, 'kvs-rgw-');
  const conf = path.join(dir, 'ceph.conf');
  const [monPort, rgwPort] = (await freePorts(2)) as [number, number];
  const fsid = randomUUID();
  for (const d of ['run', 'log', 'mon', 'osd/osd.0', 'rgw']) await mkdir(path.join(dir, d), { recursive: true });
  await writeFile(conf, cephConf(dir, fsid, monPort, rgwPort, await freePortRange(16, [monPort, rgwPort])));

  // Processes run in the foreground (-f), owned by this test process; cleanups run in
  // reverse order, so radosgw stops first and the monitor last.
  const monmap = path.join(dir, 'monmap');
  await ceph(conf, '/usr/bin/monmaptool', ['--create', '--fsid', fsid, '--add', 'a', `127.0.0.1:${monPort}`, monmap]);
  await ceph(conf, '/usr/bin/ceph-mon', ['--mkfs', '-i', 'a', '--monmap', monmap]);
  const mon = await startProcess(t, '/usr/bin/ceph-mon', ['-c', conf, '-f', '-i', 'a']);
  await waitForPort(monPort, mon, 'ceph-mon');

  const osdUuid = randomUUID();
  await ceph(conf, '/usr/bin/ceph', ['osd', 'new', osdUuid]);
  await ceph(conf, '/usr/bin/ceph-osd', ['--mkfs', '-i', '0', '--osd-uuid', osdUuid]);
  const osd = await startProcess(t, '/usr/bin/ceph-osd', ['-c', conf, '-f', '-i', '0']);

  let rgw: ServerProcess | undefined;
  const startGateway = async () => {
    rgw = await startProcess(t, '/usr/bin/radosgw', ['-c', conf, '-f', '-n', 'client.rgw.a']);
    await waitForPort(rgwPort, rgw, 'radosgw');
  };
  await startGateway();

  const accessKeyId = 'kvs' + randomBytes(6).toString('hex');
  const secretAccessKey = randomBytes(20).toString('hex');
  await ceph(conf, '/usr/bin/radosgw-admin', ['user', 'create', '--uid', 'kvs-test', '--display-name', 'kvs test', '--access-key', accessKeyId, '--secret', secretAccessKey]);

  const endpoint = `http://127.0.0.1:${rgwPort}`;
  const client = new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId, secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  let buckets = 0;

  const server: S3TestServer = {
    endpoint,
    accessKeyId,
    secretAccessKey,
    env: { KVS_S3_ACCESS_KEY_ID: accessKeyId, KVS_S3_SECRET_ACCESS_KEY: secretAccessKey, AWS_REGION: 'us-east-1' },
    async createBucket(opts = {}) {
      const name = opts.name ?? `kvs-test-${++buckets}-${randomBytes(3).toString('hex')}`;
      await client.send(new CreateBucketCommand({ Bucket: name }));
      if (opts.versioned) {
        await client.send(new PutBucketVersioningCommand({ Bucket: name, VersioningConfiguration: { Status: 'Enabled' } }));
      }
      return name;
    },
    storeOptions: (bucket, prefix, encryptionKey) => ({ endpoint, bucket, prefix, encryptionKey, credentials: { accessKeyId, secretAccessKey } }),
    kvsArgs: (bucket, prefix) => ['--s3-endpoint', endpoint, '--s3-bucket', bucket, '--s3-prefix', prefix],
    async stopGateway() {
      await rgw?.stop();
    },
    startGateway,
    async stop() {
      client.destroy();
      await rgw?.stop();
      await osd.stop();
      await mon.stop();
    },
  };
  return server;
}
