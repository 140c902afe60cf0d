// etcdserverpb.Auth. Writes go to storage on the Write stream (through the WAL), after the
// gateway checked the caller (root, while auth is enabled) and hashed any password; reads
// (UserGet/List, RoleGet/List) are answered here from LMDB, linearizably on a cluster (etcd
// serves them through raft: a user added through the leader is there on a follower at once).
// Authenticate checks the password here (bcrypt off the event loop, the lockout first), and
// storage issues the token (a simple token, through the WAL) or the gateway signs it (a JWT,
// --auth-token jwt: nothing stored).
import type { ServerCall, UnaryCallback } from '../../../shared/grpc/server.js';
import { service, encode } from '../../../shared/proto/index.js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META, readMeta } from '../../../shared/mvcc/schema.js';
import { EtcdError } from '../../../shared/errors.js';
import { AuthErrors } from '../../../shared/auth/errors.js';
import { getRole, getUser, listRoles, listUsers, authMeta } from '../../../shared/auth/tables.js';
import * as M from '../../../shared/metrics.js';
import type { Logger } from '../../../shared/log.js';
import type { WriteLink } from '../../../shared/batch-link/link.js';
import type { NodeInfo } from '../node-info.js';
import { toServiceError } from '../service-error.js';
import { Op } from '../../../shared/storage/ops.js';
import type { AuthGate, Caller } from './gate.js';
import { Lockout } from './lockout.js';
import { checkPassword, hashPassword } from './passwords.js';
import type { JwtTokens } from './jwt.js';

export interface AuthServiceOptions {
  bcryptCost: number;
  lockout?: Lockout;
  /** --auth-token jwt: Authenticate answers a JWT signed here instead of a simple token from storage. */
  jwt?: JwtTokens;
}

type Handler = (call: ServerCall<any, unknown>, cb: UnaryCallback<unknown>) => void;

/** Auth changes that raced a request are retried this often before the error reaches the client. */
const STALE_RETRIES = 3;

export function authService(db: MvccDb, link: WriteLink, gate: AuthGate, node: NodeInfo, log: Logger, opts: AuthServiceOptions) {
  const def = service('etcdserverpb.Auth');
  const lockout = opts.lockout ?? new Lockout();
  const header = () => node.header(readMeta(db, META.revision));

  /**
   * On a cluster, waits until this node has applied what the leader had committed (a
   * follower's view may lag a change made through the leader a moment ago), as etcd reads
   * users and roles through raft and Authenticate after a linearizable read notify.
   */
  const caughtUp = (): Promise<void> | undefined => (node.mustLinearize(false) ? gate.catchUp() : undefined);

  /** A read handler, answered once caught up (`read` runs in a fresh read snapshot). */
  const linearRead = (read: (call: ServerCall<any, unknown>) => unknown): Handler => (call, cb) => {
    const answer = () => {
      try {
        cb(null, read(call));
      } catch (err) {
        cb(toServiceError(err));
      }
    };
    const wait = caughtUp();
    if (wait) wait.then(answer, (err) => cb(toServiceError(err)));
    else answer();
  };

  /** The caller (undefined: auth disabled), in a fresh read snapshot. */
  const who = (call: ServerCall<any, unknown>): Caller | undefined => {
    db.env.resetReadTxn();
    return gate.caller(call);
  };

  /** UserList, RoleList: root needed while auth is enabled; the names of what `list` reads, as `field`. */
  const nameList = (field: 'users' | 'roles', list: (d: typeof db) => { name: Buffer }[]): Handler =>
    linearRead((call) => {
      who(call)?.admin();
      return { header: header(), [field]: list(db).map((x) => x.name.toString()) };
    });

  /**
   * An admin write: root needed while auth is enabled (etcd's needAdminPermission), then the
   * request goes to storage with the auth revision it was checked at. If auth changed in
   * between, storage refuses it and it is checked and sent again.
   */
  const adminWrite = (op: number, typeName: string, prepare?: (req: any) => Promise<object | undefined> | object | undefined): Handler => (call, cb) => {
    void (async () => {
      let req: object = call.request;
      let prepared = false;
      // The pre-checks below read users: a lagging follower must not refuse what exists.
      if (prepare) await caughtUp();
      for (let attempt = 0; ; attempt++) {
        const caller = who(call);
        caller?.admin();
        if (prepare && !prepared) {
          req = (await prepare(call.request)) ?? req;
          prepared = true;
        }
        const revision = caller ? caller.revision : gate.meta().revision;
        try {
          return await link.call(op, encode(typeName, req), revision);
        } catch (err) {
          if (err instanceof EtcdError && err.message === AuthErrors.authOldRevision.message && attempt < STALE_RETRIES) continue;
          throw err;
        }
      }
    })().then((res) => cb(null, res), (err) => cb(toServiceError(err)));
  };

  /** Replaces a password by its bcrypt hash before the request leaves for storage. */
  const hashed = async (req: { name: string; password: string; options?: { noPassword?: boolean } | null }) => {
    if (req.options?.noPassword) return { ...req, password: '' };
    // Nothing to hash for: the answer will be an error (name empty, user exists or missing).
    return { ...req, password: await hashPassword(req.password, opts.bcryptCost) };
  };

  /**
   * A JWT for `name`, whose password (`hash`) was just checked: signed with the auth revision
   * now, if the user still has that hash (as storage checks before issuing a simple token).
   */
  const jwtToken = async (jwt: JwtTokens, name: string, hash: Buffer) => {
    db.env.resetReadTxn();
    const meta = authMeta(db);
    if (!meta.enabled) throw AuthErrors.authNotEnabled;
    const user = getUser(db, name);
    if (!user || user.noPassword || !user.password.equals(hash)) throw AuthErrors.authFailed;
    return { header: header(), token: await jwt.sign(name, meta.revision) };
  };

  const impl: Record<string, Handler> = {
    AuthEnable: adminWrite(Op.AUTH_ENABLE, 'etcdserverpb.AuthEnableRequest'),
    AuthDisable: adminWrite(Op.AUTH_DISABLE, 'etcdserverpb.AuthDisableRequest'),
    UserAdd: adminWrite(Op.AUTH_USER_ADD, 'etcdserverpb.AuthUserAddRequest', (req) => {
      // Cheap refusals before the bcrypt work (storage checks them again).
      if (req.name.length === 0) throw AuthErrors.userEmpty;
      if (getUser(db, req.name)) throw AuthErrors.userAlreadyExist;
      return hashed(req);
    }),
    UserChangePassword: adminWrite(Op.AUTH_USER_CHANGE_PASSWORD, 'etcdserverpb.AuthUserChangePasswordRequest', (req) => {
      if (!getUser(db, req.name)) throw AuthErrors.userNotFound;
      return hashed(req);
    }),
    UserDelete: adminWrite(Op.AUTH_USER_DELETE, 'etcdserverpb.AuthUserDeleteRequest'),
    UserGrantRole: adminWrite(Op.AUTH_USER_GRANT_ROLE, 'etcdserverpb.AuthUserGrantRoleRequest'),
    UserRevokeRole: adminWrite(Op.AUTH_USER_REVOKE_ROLE, 'etcdserverpb.AuthUserRevokeRoleRequest'),
    RoleAdd: adminWrite(Op.AUTH_ROLE_ADD, 'etcdserverpb.AuthRoleAddRequest'),
    RoleDelete: adminWrite(Op.AUTH_ROLE_DELETE, 'etcdserverpb.AuthRoleDeleteRequest'),
    RoleGrantPermission: adminWrite(Op.AUTH_ROLE_GRANT_PERMISSION, 'etcdserverpb.AuthRoleGrantPermissionRequest'),
    RoleRevokePermission: adminWrite(Op.AUTH_ROLE_REVOKE_PERMISSION, 'etcdserverpb.AuthRoleRevokePermissionRequest'),

    UserGet: linearRead((call) => {
      const caller = who(call);
      const name: string = call.request.name;
      // etcd: root, or the user asking about themself.
      if (caller && name !== caller.user) caller.admin();
      const user = getUser(db, name);
      if (!user) throw AuthErrors.userNotFound;
      return { header: header(), roles: user.roles };
    }),
    UserList: nameList('users', listUsers),
    RoleGet: linearRead((call) => {
      const caller = who(call);
      const role: string = call.request.role;
      // etcd: root, or a user holding the role.
      if (caller && !caller.isAdmin() && !caller.hasRole(role)) caller.admin();
      const r = getRole(db, role);
      if (!r) throw AuthErrors.roleNotFound;
      return { header: header(), perm: r.perms };
    }),
    RoleList: nameList('roles', listRoles),

    Authenticate(call, cb) {
      const { name, password } = call.request as { name: string; password: string };
      const outcome = (result: 'success' | 'fail' | 'locked') => M.authAttemptsTotal.inc({ result });
      void (async () => {
        await caughtUp();
        db.env.resetReadTxn();
        if (!authMeta(db).enabled) throw AuthErrors.authNotEnabled;
        if (lockout.locked(name)) {
          outcome('locked');
          throw AuthErrors.authFailed;
        }
        const user = getUser(db, name);
        const fail = (err: EtcdError = AuthErrors.authFailed) => {
          outcome('fail');
          if (lockout.fail(name)) log.warn({ user: name.slice(0, 256) }, 'user name locked for 15 minutes after 5 failed authentications');
          return err;
        };
        if (!user) throw fail();
        if (user.noPassword) throw fail(AuthErrors.noPasswordUser);
        if (!(await checkPassword(password, user.password))) throw fail();
        let res: unknown;
        if (opts.jwt) {
          res = await jwtToken(opts.jwt, name, user.password);
        } else {
          // Storage issues the token if the hash it holds is still the one checked here.
          const body = encode('etcdserverpb.AuthenticateRequest', { name, password: user.password.toString('latin1') });
          res = await link.call(Op.AUTHENTICATE, body);
        }
        lockout.succeed(name);
        outcome('success');
        return res;
      })().then((res) => cb(null, res), (err) => cb(toServiceError(err)));
    },
  };
  return { def, impl };
}
