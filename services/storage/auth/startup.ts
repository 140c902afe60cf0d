// --auth-enabled at start (the spec's Auth state table): with the flag, auth is enabled if a
// root user with the root role exists; without it, auth enabled on the data is disabled (users
// and roles are kept). Either change is an ordinary auth write, through the WAL.
import type { Logger } from '../../../shared/log.js';
import { authMeta, getUser, hasRootRole, ROOT_USER } from '../../../shared/auth/tables.js';
import { encode } from '../../../shared/proto/index.js';
import type { Engine } from '../engine.js';
import { Op } from '../../../shared/storage/ops.js';

export async function applyAuthFlag(engine: Engine, authEnabled: boolean, log: Logger): Promise<void> {
  const meta = authMeta(engine.db);
  const submit = (op: number, type: string) =>
    new Promise<void>((resolve, reject) =>
      engine.submit(op, encode(type, {}), (r) => (r.code === 0 ? resolve() : reject(new Error(r.message)))),
    );
  if (authEnabled && !meta.enabled) {
    const root = getUser(engine.db, ROOT_USER);
    if (!root || !hasRootRole(root)) {
      log.warn(
        '--auth-enabled: auth stays DISABLED because there is no root user with the root role yet; every client has full access. ' +
          'Add one (etcdctl user add root; etcdctl user grant-role root root), then run etcdctl auth enable',
      );
      return;
    }
    await submit(Op.AUTH_ENABLE, 'etcdserverpb.AuthEnableRequest');
    log.info('auth enabled (--auth-enabled)');
  } else if (!authEnabled && meta.enabled) {
    await submit(Op.AUTH_DISABLE, 'etcdserverpb.AuthDisableRequest');
    log.warn(
      'auth was enabled on this data, and kvs was started without --auth-enabled: auth is now DISABLED and every client can read and write everything. ' +
        'Users and roles are kept: start with --auth-enabled (or run etcdctl auth enable) to enforce them again',
    );
  }
}
