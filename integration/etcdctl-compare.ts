// Runs the same etcdctl 3.4 command against kvs and a real etcd and compares what it prints.
// Only what legitimately differs between two servers is normalised: cluster and member ids,
// raft term and index, db size, server version, member name and peer URLs, the endpoint
// address, timings, and the timestamp and client id in etcdctl's log lines.
import assert from 'node:assert/strict';
import { etcdctl, type CmdOptions, type CmdResult } from '../testkit/harness.js';

/** JSON.parse that keeps 64-bit ids exact (as strings). */
export function parseJson(text: string): unknown {
  return JSON.parse(text.replace(/([:\[,]\s*)(\d{16,})(?=\s*[,}\]])/g, '$1"$2"'));
}

const ID_FIELDS = new Set(['cluster_id', 'member_id', 'ID', 'leader']);

/** Replaces the fields that differ between any two servers with placeholders. */
export function normaliseJson(value: unknown, endpoint: string): unknown {
  if (Array.isArray(value)) return value.map((v) => normaliseJson(v, endpoint));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      if (ID_FIELDS.has(k)) out[k] = '<id>';
      else if (k === 'raft_term' || k === 'raftTerm') out[k] = '<term>';
      else if (k === 'raftIndex' || k === 'raftAppliedIndex') out[k] = '<index>';
      else if (k === 'dbSize' || k === 'dbSizeInUse') out[k] = '<size>';
      else if (k === 'version' && typeof v === 'string') out[k] = '<version>';
      else if (k === 'name' && typeof v === 'string') out[k] = '<name>';
      else if (k === 'peerURLs') out[k] = '<peers>';
      else if (k === 'took') out[k] = '<took>';
      else if (typeof v === 'string') out[k] = v.split(endpoint).join('<endpoint>');
      else out[k] = normaliseJson(v, endpoint);
    }
    if ('clientURLs' in out && !('peerURLs' in out)) out.peerURLs = '<peers>'; // kvs has no peer port
    return out;
  }
  return value;
}

/** Lines of output; a JSON line becomes its normalised value (compared without regard to key order). */
export function normaliseText(text: string, endpoint: string): unknown[] {
  return text
    .split(endpoint)
    .join('<endpoint>')
    .split('\n')
    .map((line) => {
      if (line.startsWith('{') || line.startsWith('[')) {
        try {
          const v = parseJson(line) as Record<string, unknown>;
          // etcdctl's own log line: keep the level, message and error, not the time or client id.
          if (v && typeof v === 'object' && 'level' in v && 'msg' in v) return `[${v.level}] ${v.msg}: ${v.error ?? ''}`;
          return normaliseJson(v, endpoint);
        } catch {
          return line;
        }
      }
      return line
        .replace(/took = [\d.]+[µmn]?s/, 'took = <took>')
        .replace(/^"(ClusterID|MemberID)" : \d+$/, '"$1" : <id>')
        .replace(/^"RaftTerm" : \d+$/, '"RaftTerm" : <term>');
    });
}

export interface Normalised {
  exitCode: number;
  stdout: unknown[];
  stderr: unknown[];
}

export function normalise(r: CmdResult, endpoint: string): Normalised {
  return { exitCode: r.exitCode, stdout: normaliseText(r.stdout, endpoint), stderr: normaliseText(r.stderr, endpoint) };
}

/** The last line of etcdctl's stderr: its "Error: ..." summary. */
export function lastError(r: CmdResult): string {
  return r.stderr.trimEnd().split('\n').at(-1) ?? '';
}

/**
 * `same` runs one etcdctl command against both and asserts identical normalised output;
 * `ok` also asserts it succeeded. `replace` lists more per-server strings to normalise
 * (e.g. a file path or a member id in hex), as [kvs's, etcd's, placeholder].
 */
export function etcdctlSideBySide(kvsEndpoint: string, etcdEndpoint: string) {
  const same = async (args: string[], opts: CmdOptions & { replace?: [string, string, string][] } = {}): Promise<{ kvs: CmdResult; etcd: CmdResult }> => {
    const swap = (r: CmdResult, side: 0 | 1): CmdResult => {
      let { stdout, stderr } = r;
      for (const rep of opts.replace ?? []) {
        stdout = stdout.split(rep[side]).join(rep[2]);
        stderr = stderr.split(rep[side]).join(rep[2]);
      }
      return { ...r, stdout, stderr };
    };
    const argsFor = (side: 0 | 1) => args.map((a) => (opts.replace ?? []).reduce((x, rep) => x.split(rep[2]).join(rep[side]), a));
    const [k, e] = await Promise.all([etcdctl(kvsEndpoint, argsFor(0), opts), etcdctl(etcdEndpoint, argsFor(1), opts)]);
    assert.equal(k.timedOut, false, `etcdctl ${args.join(' ')} timed out against kvs`);
    assert.deepEqual(
      normalise(swap(k, 0), kvsEndpoint),
      normalise(swap(e, 1), etcdEndpoint),
      `etcdctl ${args.join(' ')}${opts.input ? ` <<< ${JSON.stringify(opts.input)}` : ''}\n--- kvs:\n${k.stdout}${k.stderr}\n--- etcd:\n${e.stdout}${e.stderr}`,
    );
    return { kvs: k, etcd: e };
  };
  const ok = async (args: string[], opts: CmdOptions & { replace?: [string, string, string][] } = {}) => {
    const r = await same(args, opts);
    assert.equal(r.kvs.exitCode, 0, r.kvs.stderr);
    return r.kvs;
  };
  return { same, ok };
}
