// The object-store commands of the `kvs` command line: status, gc, branch fork|unfork. They
// read and write the object store directly; no node needs to run.
import type sade from 'sade';
import { RUN_FLAGS, type Config } from '../../shared/config.js';
import { objectStoreOptions, openObjectStore, type ObjectStore } from '../../shared/objectstore/index.js';

type Prog = ReturnType<typeof sade>;
type Opts = Record<string, unknown>;

const STORE_FLAGS = ['s3-bucket', 's3-prefix', 's3-endpoint', 'object-store-encryption-key-file', 'object-store-encryption-key-env'];

function withStoreFlags(cmd: Prog): Prog {
  for (const f of RUN_FLAGS.filter((f) => STORE_FLAGS.includes(f.flag))) {
    cmd.option(`--${f.flag}`, `${f.description} (env ${f.env}${f.default !== undefined ? `, default ${f.default}` : ''})`);
  }
  return cmd;
}

export function registerObjectStoreCommands(prog: Prog, config: (opts: Opts) => Config, fail: (err: unknown) => never): void {
  const withStore = (fn: (store: ObjectStore, opts: Opts) => Promise<void>) => async (opts: Opts) => {
    let store: ObjectStore | undefined;
    try {
      store = await openObjectStore(objectStoreOptions(config(opts)));
      await fn(store, opts);
    } catch (err) {
      fail(err);
    } finally {
      store?.close();
    }
  };
  const print = (s: string) => process.stdout.write(s);

  withStoreFlags(prog.command('status').describe('What a prefix of the object store holds: latest checkpoint, counts, branch forks (no node needed)'))
    .option('--json', 'Print JSON')
    .example('status --s3-bucket kvs --s3-prefix prod/')
    .action(
      withStore(async (store, opts) => {
        const { readStatus, formatStatus } = await import('./status.js');
        const r = await readStatus(store);
        print(opts.json ? JSON.stringify(r) + '\n' : formatStatus(r));
      }),
    );

  withStoreFlags(
    prog
      .command('gc')
      .describe('Delete checkpoints beyond the newest --keep, then SSTs only they used, then WAL segments the latest checkpoint covers'),
  )
    .option('--keep', 'Number of most recent checkpoints retained (branch-pinned ones are kept too)', 3)
    .option('--json', 'Print JSON')
    .example('gc --s3-bucket kvs --s3-prefix prod/ --keep 3')
    .action(
      withStore(async (store, opts) => {
        const { runGc } = await import('./gc.js');
        const { progressReporter } = await import('../../shared/progress.js');
        const r = await runGc(store, { keep: String(opts.keep), progress: progressReporter('gc') });
        for (const w of r.warnings) process.stderr.write(`kvs gc: warning: ${w}\n`);
        if (opts.json) print(JSON.stringify(r) + '\n');
        else print(`deleted checkpoints: ${r.checkpoints}\ndeleted orphan SSTs: ${r.orphanSsts}\ndeleted WAL segments: ${r.walSegments}\n`);
      }),
    );

  withStoreFlags(prog.command('branch fork').describe('Register a branch in the source prefix, pinning a checkpoint against gc; prints the checkpoint key'))
    .option('--branch-id', 'Branch name')
    .option('--checkpoint', 'Checkpoint key to fork from (default: the latest checkpoint)')
    .example('branch fork --s3-bucket kvs --s3-prefix prod/ --branch-id staging')
    .action(
      withStore(async (store, opts) => {
        const { forkBranch } = await import('../../shared/objectstore/branches.js');
        const checkpoint = opts.checkpoint === undefined ? undefined : String(opts.checkpoint);
        const reg = await forkBranch(store, opts['branch-id'] as string, checkpoint);
        print(`${reg.checkpoint}\n`);
      }),
    );

  withStoreFlags(prog.command('branch unfork').describe('Unregister a branch, so that gc on the source prefix can reclaim its checkpoint'))
    .option('--branch-id', 'Branch name')
    .example('branch unfork --s3-bucket kvs --s3-prefix prod/ --branch-id staging')
    .action(
      withStore(async (store, opts) => {
        const { unforkBranch } = await import('../../shared/objectstore/branches.js');
        const reg = await unforkBranch(store, opts['branch-id'] as string);
        print(`unforked ${reg.branchId} (was pinning ${reg.checkpoint})\n`);
      }),
    );

  withStoreFlags(
    prog
      .command('restore-point')
      .describe('Record the object versions a restore of the prefix reads now (versioned buckets), for a later point-in-time restore'),
  )
    .option('--output', 'File to write the restore point (JSON) to')
    .example('restore-point --s3-bucket kvs --s3-prefix prod/ --output before-migration.json')
    .action(
      withStore(async (store, opts) => {
        const { writeRestorePoint } = await import('./restore-point.js');
        const p = await writeRestorePoint(store, opts.output === undefined ? '' : String(opts.output));
        print(`restore point at revision ${p.revision} (${p.checkpoint}, ${Object.keys(p.objects).length} objects) written to ${opts.output}\n`);
      }),
    );
}
