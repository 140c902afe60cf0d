// The `kvs` command line.
import sade from 'sade';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import { RUN_FLAGS, resolveConfig, socketPath, type Config } from '../shared/config.js';
import { service } from '../shared/proto/index.js';
import { guardSignals } from '../shared/component.js';
import { VERSION } from '../shared/version.js';
import { Supervisor, COMPONENTS } from './supervisor.js';
import { DataDirHeldError } from '../shared/data-dir-lock.js';
import { registerObjectStoreCommands } from './commands/cli.js';

const prog = sade('kvs').version(VERSION.kvs);

function withRunFlags(cmd: ReturnType<typeof sade>) {
  for (const f of RUN_FLAGS) {
    cmd.option(`--${f.flag}`, `${f.description} (env ${f.env}${f.default !== undefined ? `, default ${f.default}` : ''})`);
  }
  return cmd;
}

function fail(err: unknown): never {
  process.stderr.write(`kvs: ${(err as Error)?.message ?? String(err)}\n`);
  process.exit(2);
}

function config(opts: Record<string, unknown>): Config {
  try {
    return resolveConfig(opts);
  } catch (err) {
    fail(err);
  }
}

withRunFlags(prog.command('run').describe('Start a node: the supervisor and its storage and gateway processes'))
  .example('run')
  .example('run --data-dir /var/lib/kvs --listen 0.0.0.0:3379')
  .action(async (opts: Record<string, unknown>) => {
    const cfg = config(opts);
    const taskset = cfg.cpuAffinity ? checkTaskset(cfg.cpuAffinity) : undefined;
    try {
      await new Supervisor(cfg, { taskset }).run();
    } catch (err) {
      if (err instanceof DataDirHeldError) fail(err);
      throw err;
    }
  });

/**
 * --cpu-affinity: the absolute path of util-linux `taskset` on PATH, once it has run node on
 * those CPUs; otherwise the node does not start (exit 2), saying why.
 */
function checkTaskset(cpus: string): string {
  const found = (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir !== '')
    .map((dir) => path.resolve(dir, 'taskset'))
    .find((file) => {
      try {
        fs.accessSync(file, fs.constants.X_OK);
        return fs.statSync(file).isFile();
      } catch {
        return false;
      }
    });
  if (!found) fail(`--cpu-affinity ${cpus} needs taskset (util-linux; Debian package util-linux) on PATH, and there is none on ${process.env.PATH ?? '(PATH unset)'}`);
  const r = spawnSync(found, ['-c', cpus, process.execPath, '-e', ''], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
  if (r.status !== 0) {
    const why = r.error?.message ?? (r.stderr.trim() || (r.signal ? `signal ${r.signal}` : `exit code ${r.status}`));
    fail(`--cpu-affinity ${cpus}: ${found} -c ${cpus} cannot run node: ${why}`);
  }
  return found;
}

withRunFlags(
  prog
    .command('component <name>')
    .describe(`Run one component in the foreground, for debugging (${COMPONENTS.join(', ')}); takes the flags of run. Start storage before gateway.`),
)
  .example('component storage --data-dir ./kvs-data')
  .action(async (name: string, opts: Record<string, unknown>) => {
    const cfg = config(opts);
    // Before anything else: under `kvs run` the supervisor alone stops a component.
    guardSignals();
    try {
      switch (name) {
        case 'storage':
          return await (await import('../services/storage/main.js')).runStorage(cfg);
        case 'gateway':
          return await (await import('../services/gateway/main.js')).runGateway(cfg);
        case 'archiver':
          return await (await import('../services/archiver/main.js')).runArchiver(cfg);
        case 'peer':
          return await (await import('../services/peer/main.js')).runPeer(cfg);
        default:
          fail(`unknown component "${name}"; components: ${COMPONENTS.join(', ')}`);
      }
    } catch (err) {
      // A startup failure's message says what to do; anything else gets its stack.
      const e = err as Error;
      process.stderr.write(`kvs ${name}: ${e.name === 'StartupError' ? e.message : (e.stack ?? e)}\n`);
      process.exit(1);
    }
  });

function controlClient(dataDir: string): grpc.Client & Record<string, any> {
  const Ctor = grpc.makeGenericClientConstructor(service('kvs.control.Control'), 'Control');
  return new Ctor(`unix:${socketPath(dataDir, 'ctl')}`, grpc.credentials.createInsecure()) as any;
}

function ctlCall(opts: Record<string, unknown>, method: string, req: object): Promise<any> {
  const cfg = config(opts);
  const client = controlClient(cfg.dataDir);
  return new Promise((resolve, reject) => {
    client[method](req, { deadline: Date.now() + 60_000 }, (err: grpc.ServiceError | null, res: unknown) => {
      client.close();
      if (!err) return resolve(res);
      if (err.code === grpc.status.UNAVAILABLE) {
        reject(new Error(`no kvs node is running on data directory ${cfg.dataDir} (${socketPath(cfg.dataDir, 'ctl')} does not answer)`));
      } else reject(new Error(err.details || err.message));
    });
  });
}

prog
  .command('local-cluster')
  .describe('Start a cluster of nodes on this machine for trying cluster mode out (one local-directory object store, logs in --dir)')
  .option('--nodes', 'How many nodes', 3)
  .option('--dir', 'Where the nodes keep their data, logs and object store', './kvs-local-cluster')
  .option('--base-port', 'Client port of n1; node i uses base + 10(i-1) for clients and one more for peers', 3379)
  .example('local-cluster')
  .example('local-cluster --nodes 5 --base-port 4379')
  .example('local-cluster -- --auto-compact-mode revision --auto-compact-retain-revisions 1000')
  .action(async (opts: Record<string, unknown>) => {
    try {
      // Flags after `--` go to every node's `kvs run` (it checks them).
      const extra = ((opts._ as unknown[] | undefined) ?? []).map(String);
      await (await import('./commands/local-cluster.js')).localCluster({ nodes: Number(opts.nodes), dir: String(opts.dir), basePort: Number(opts['base-port']), extra });
    } catch (err) {
      fail(err);
    }
  });

prog
  .command('ctl <action> [component]')
  .describe('Talk to a running node: `status` lists its components, `restart <component>` restarts one, `checkpoint` writes a checkpoint now')
  .option('--data-dir', 'Data directory of the node (env KVS_DATA_DIR, default ./kvs-data)')
  .option('--json', 'Print JSON')
  .example('ctl status --data-dir ./kvs-data')
  .example('ctl restart gateway')
  .action(async (action: string, component: string | undefined, opts: Record<string, unknown>) => {
    try {
      if (action === 'status') {
        const res = await ctlCall(opts, 'Status', {});
        if (opts.json) return void process.stdout.write(JSON.stringify(res) + '\n');
        process.stdout.write(`node ${res.ready ? 'ready' : `not ready (${res.notReadyReason})`}, clients on ${res.listen}, supervisor pid ${res.supervisorPid}\n`);
        for (const c of res.components) {
          process.stdout.write(`${c.name.padEnd(10)} ${c.state.padEnd(10)} pid ${String(c.pid || '-').padEnd(8)} restarts ${c.restarts}${c.lastExit ? `  last exit: ${c.lastExit}` : ''}${c.detail ? `  (${c.detail})` : ''}\n`);
        }
      } else if (action === 'restart') {
        if (!component) fail(`restart needs a component: ${COMPONENTS.join(', ')}`);
        const res = await ctlCall(opts, 'Restart', { component });
        process.stdout.write(`${res.component.name} restarted: pid ${res.component.pid}, state ${res.component.state}\n`);
      } else if (action === 'checkpoint') {
        const res = await archiverCheckpoint(config(opts));
        process.stdout.write(res.unchanged ? `no change since ${res.key}\n` : `checkpoint ${res.key}: ${res.pieces} pieces, ${res.uploadedPieces} uploaded\n`);
      } else {
        fail(`unknown ctl action "${action}"; actions: status, restart, checkpoint`);
      }
    } catch (err) {
      fail(err);
    }
  });

prog
  .command('snapshot restore <file>')
  .describe('Make a new data directory from a snapshot taken with `etcdctl snapshot save` against kvs or etcd 3.4/3.5, or a copied etcd member/snap/db (checks its sha256)')
  .option('--data-dir', 'The data directory to create (env KVS_DATA_DIR, default ./kvs-data); it must not hold a database yet')
  .option('--skip-hash-check', 'Accept a file without the sha256 trailer (a copied data.mdb or member/snap/db); a trailer is then not checked, as etcd', false)
  .example('snapshot restore backup.db --data-dir ./restored')
  .action(async (file: string, opts: Record<string, unknown>) => {
    try {
      const { restoreSnapshot } = await import('./snapshot-restore.js');
      const dataDir = config(opts).dataDir;
      const r = await restoreSnapshot({ file, dataDir, skipHashCheck: opts['skip-hash-check'] === true });
      if (r.format === 'kvs') {
        process.stdout.write(`restored ${file} into ${dataDir}: revision ${r.revision}, ${r.keys} keys; start it with kvs run --data-dir ${dataDir}\n`);
      } else {
        const compacted = r.compactRevision > 0 ? `, compacted at ${r.compactRevision}` : '';
        process.stdout.write(
          `restored etcd snapshot ${file} into ${dataDir}: revision ${r.revision}${compacted}, ${r.keys} keys, ${r.leases} leases, ${r.users} users, ${r.roles} roles, auth ${r.authEnabled ? 'enabled' : 'disabled'}\n`,
        );
        for (const note of r.notes ?? []) process.stdout.write(`note: ${note}\n`);
        process.stdout.write(`start it with kvs run --data-dir ${dataDir}${r.authEnabled ? ' --auth-enabled (auth stays enabled only with that flag)' : ''}\n`);
      }
    } catch (err) {
      fail(err);
    }
  });

prog
  .command('migrate')
  .describe("Copy an etcd cluster into a new data directory and keep following it, every revision kept, until stopped (SIGINT)")
  .option('--from', 'etcd endpoints, comma-separated (host:port, http:// or https://)')
  .option('--data-dir', 'The data directory to fill (env KVS_DATA_DIR, default ./kvs-data); a later run on it resumes')
  .option('--cacert', "CA bundle to verify etcd's TLS certificate")
  .option('--cert', 'Client certificate for etcd (with --key)')
  .option('--key', 'Client key for etcd (with --cert)')
  .option('--user', 'etcd user, name or name:password (root, to read the whole key space)')
  .option('--password', 'Password of --user')
  .option('--dial-timeout', 'How long to wait for an endpoint, e.g. 5s', '5s')
  .example('migrate --from 10.0.0.1:2379,10.0.0.2:2379 --data-dir /var/lib/kvs')
  .action(async (opts: Record<string, unknown>) => {
    try {
      const { migrate } = await import('./commands/migrate.js');
      const { parseDuration } = await import('../shared/duration.js');
      const from = typeof opts.from === 'string' ? opts.from : '';
      if (!from) fail('--from: give the etcd endpoints, e.g. --from 127.0.0.1:2379');
      const dataDir = config({ 'data-dir': opts['data-dir'] }).dataDir;
      const ac = new AbortController();
      const stop = () => ac.abort();
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
      const str = (k: string) => (opts[k] === undefined ? undefined : String(opts[k]));
      const r = await migrate({
        endpoints: from.split(',').map((e) => e.trim()).filter(Boolean),
        cacert: str('cacert'),
        cert: str('cert'),
        key: str('key'),
        user: str('user'),
        password: str('password'),
        dialTimeoutMs: parseDuration(String(opts['dial-timeout']), 'dial-timeout'),
        pollMs: process.env.KVS_MIGRATE_POLL_MS ? Number(process.env.KVS_MIGRATE_POLL_MS) : undefined,
        dataDir,
        signal: ac.signal,
        say: (line) => process.stdout.write(`${line}\n`),
      });
      // kvs enforces auth only when started with --auth-enabled (docs/security.md).
      process.stdout.write(`stopped at revision ${r.revision}; serve it with kvs run --data-dir ${dataDir}${r.authEnabled ? ' --auth-enabled (etcd has auth enabled)' : ''}\n`);
      process.exit(0);
    } catch (err) {
      fail(err);
    }
  });

/** `kvs ctl checkpoint`: asks the node's archiver directly (run/archiver.sock). */
function archiverCheckpoint(cfg: Config): Promise<any> {
  const Ctor = grpc.makeGenericClientConstructor(service('kvs.archiver.Archiver'), 'Archiver');
  const client = new Ctor(`unix:${socketPath(cfg.dataDir, 'archiver')}`, grpc.credentials.createInsecure()) as any;
  return new Promise((resolve, reject) => {
    client.Checkpoint({}, { deadline: Date.now() + 600_000 }, (err: grpc.ServiceError | null, res: unknown) => {
      client.close();
      if (!err) return resolve(res);
      if (err.code === grpc.status.UNAVAILABLE && /connect|No connection/i.test(err.details)) {
        reject(new Error(`no archiver answers on ${socketPath(cfg.dataDir, 'archiver')} (is the node running with --s3-bucket?)`));
      } else reject(new Error(err.details || err.message));
    });
  });
}

withRunFlags(prog.command('restore').describe('Restore a data directory from the object store (latest checkpoint and uploaded WAL), without starting a node'))
  .option('--restore-point', 'Restore the state recorded by `kvs restore-point` in this file (a versioned bucket) instead of the latest')
  .example('restore --data-dir ./restored --s3-bucket kvs --s3-prefix prod/')
  .example('restore --data-dir ./restored --s3-bucket kvs --s3-prefix prod/ --restore-point before-migration.json')
  .action(async (opts: Record<string, unknown>) => {
    try {
      const restorePoint = opts['restore-point'] === undefined ? undefined : String(opts['restore-point']);
      process.stdout.write(await (await import('../services/archiver/restore-command.js')).restoreCommand(config(opts), { restorePoint }));
    } catch (err) {
      fail(err);
    }
  });

registerObjectStoreCommands(prog, config, fail);

// Listed here for `kvs --help`; the benchmark is its own program (bin/kvs-bench.js) and parses
// its own flags (`kvs bench --help`).
prog
  .command('bench')
  .describe('Benchmark kvs against etcd 3.4 in one run, or any etcd v3 endpoint with --endpoints (see docs/benchmarks.md; every flag: kvs bench --help)')
  .example('bench --quick')
  .example('bench --endpoints 10.0.0.5:2379 --workloads seq-put,par-get');

if (process.argv[2] === 'bench') {
  try {
    process.exitCode = await (await import('./commands/bench.js')).runBench(process.argv.slice(3));
  } catch (err) {
    fail(err);
  }
} else {
  prog.parse(process.argv, { unknown: refuseUnknownFlag });
}

/**
 * A misspelt or unknown flag stops the command (etcd does the same): a node started with
 * `--auth-enable` must not come up silently without it.
 */
function refuseUnknownFlag(arg: string): never {
  const name = arg.replace(/^-+/, '').split('=')[0]!;
  const command = process.argv[2] ?? '';
  const known = knownFlags();
  if (known.includes(name)) {
    const hint = command === 'local-cluster' ? '; flags for the nodes\' `kvs run` go after `--`' : '';
    fail(`--${name} is not a flag of \`kvs ${command}\`${hint}; \`kvs ${command} --help\` lists its flags`);
  }
  const near = closest(name, known);
  fail(`unknown flag --${name}${near ? ` (did you mean --${near}?)` : ''}; \`kvs <command> --help\` lists the flags`);
}

/** Every long flag some command declares (sade keeps them per command in its tree). */
function knownFlags(): string[] {
  const tree = (prog as unknown as { tree: Record<string, { options?: string[][] } | string> }).tree;
  const names = new Set<string>(['help', 'version']);
  for (const cmd of Object.values(tree)) {
    if (typeof cmd === 'string') continue;
    for (const [spec] of cmd.options ?? []) for (const m of spec!.matchAll(/--([\w-]+)/g)) names.add(m[1]!);
  }
  return [...names];
}

/** The known name within a third of its length in edits (Levenshtein), if any. */
function closest(name: string, known: string[]): string | undefined {
  let best: string | undefined;
  let bestDist = Math.max(2, Math.ceil(name.length / 3)) + 1;
  for (const k of known) {
    const d = editDistance(name, k);
    if (d < bestDist) [best, bestDist] = [k, d];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length]!;
}
