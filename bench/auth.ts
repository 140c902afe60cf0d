// Auth for the -auth workloads (par-get-auth, par-put-auth): after the preload, the main
// process sets up etcd's Auth API on the server under test (kvs and etcd alike, the same calls
// etcdctl makes) and turns auth on; each load-generator client then logs in as `bench` once
// and sends its token in the `token` metadata of every request (testkit/kv-client.ts).
import { decode } from '../shared/proto/index.js';
import { KvClient } from '../testkit/kv-client.js';
import { DATA_AREA, ROOT_PREFIX, key, prefixEnd } from './keys.js';

export const ROOT_USER = 'root';
export const BENCH_USER = 'bench';
export const BENCH_ROLE = 'bench-rw';
/** Loopback servers started for one workload and removed after it. */
export const ROOT_PASSWORD = 'bench-root-password';
export const BENCH_PASSWORD = 'bench-password';

/** etcd's authpb.Permission.Type. */
const READWRITE = 2;

/**
 * Creates `root` (role root) and `bench` (role bench-rw: readwrite on kvs-bench/), enables
 * auth, then checks once that it is enforced: a Range without a token and one outside
 * kvs-bench/ are refused, and `bench` reads a preloaded key (`preloaded`) or the prefix.
 */
export async function enableAuth(endpoint: string, preloaded: boolean): Promise<void> {
  const admin = new KvClient(endpoint);
  const anon = new KvClient(endpoint);
  const bench = new KvClient(endpoint);
  try {
    await admin.connect();
    // As `etcdctl user add root`, `etcdctl role add root`, `etcdctl user grant-role root root`.
    await admin.authCall('UserAdd', { name: ROOT_USER, password: ROOT_PASSWORD });
    await admin.authCall('RoleAdd', { name: ROOT_USER });
    await admin.authCall('UserGrantRole', { user: ROOT_USER, role: ROOT_USER });
    await admin.authCall('RoleAdd', { name: BENCH_ROLE });
    await admin.authCall('RoleGrantPermission', {
      name: BENCH_ROLE,
      perm: { permType: READWRITE, key: Buffer.from(ROOT_PREFIX, 'latin1'), rangeEnd: prefixEnd(ROOT_PREFIX) },
    });
    await admin.authCall('UserAdd', { name: BENCH_USER, password: BENCH_PASSWORD });
    await admin.authCall('UserGrantRole', { user: BENCH_USER, role: BENCH_ROLE });
    await admin.authCall('AuthEnable', {});

    const probe = preloaded ? key(DATA_AREA, 0) : Buffer.from(ROOT_PREFIX, 'latin1');
    await anon.connect();
    await refused(() => anon.range(probe), /user name is empty|permission denied|unauthenticated/i, 'a Range without a token');
    await bench.connect();
    await bench.authenticate(BENCH_USER, BENCH_PASSWORD);
    const res = decode('etcdserverpb.RangeResponse', await bench.range(probe, preloaded ? {} : { rangeEnd: prefixEnd(ROOT_PREFIX), countOnly: true }));
    if (preloaded && (res.kvs ?? []).length !== 1) throw new Error(`${endpoint}: ${BENCH_USER} got ${(res.kvs ?? []).length} key-values for a preloaded key`);
    await refused(() => bench.range(Buffer.from('outside-kvs-bench', 'latin1')), /permission denied/i, `a Range by ${BENCH_USER} outside ${ROOT_PREFIX}`);
  } finally {
    admin.close();
    anon.close();
    bench.close();
  }
}

async function refused(call: () => Promise<unknown>, expected: RegExp, what: string): Promise<void> {
  try {
    await call();
  } catch (err) {
    if (expected.test((err as Error).message)) return;
    throw new Error(`auth check: ${what} failed with an unexpected error: ${(err as Error).message}`);
  }
  throw new Error(`auth check: ${what} was answered: auth is not enforced`);
}
