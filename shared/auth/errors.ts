// etcd's auth errors as clients see them: the code and text of etcd 3.4's rpctypes
// (etcdserver/api/v3rpc/rpctypes/error.go). Clients match on the text (the etcd3 client and
// clientv3 re-authenticate on "invalid auth token"), so these are never reworded.
import { status } from '@grpc/grpc-js';
import { EtcdError } from '../errors.js';

const e = (code: status, message: string) => new EtcdError(code, message);

export const AuthErrors = {
  rootUserNotExist: e(status.FAILED_PRECONDITION, 'etcdserver: root user does not exist'),
  rootRoleNotExist: e(status.FAILED_PRECONDITION, 'etcdserver: root user does not have root role'),
  userAlreadyExist: e(status.FAILED_PRECONDITION, 'etcdserver: user name already exists'),
  userEmpty: e(status.INVALID_ARGUMENT, 'etcdserver: user name is empty'),
  userNotFound: e(status.FAILED_PRECONDITION, 'etcdserver: user name not found'),
  roleAlreadyExist: e(status.FAILED_PRECONDITION, 'etcdserver: role name already exists'),
  roleNotFound: e(status.FAILED_PRECONDITION, 'etcdserver: role name not found'),
  roleEmpty: e(status.INVALID_ARGUMENT, 'etcdserver: role name is empty'),
  authFailed: e(status.INVALID_ARGUMENT, 'etcdserver: authentication failed, invalid user ID or password'),
  permissionNotGiven: e(status.INVALID_ARGUMENT, 'etcdserver: permission not given'),
  permissionDenied: e(status.PERMISSION_DENIED, 'etcdserver: permission denied'),
  roleNotGranted: e(status.FAILED_PRECONDITION, 'etcdserver: role is not granted to the user'),
  permissionNotGranted: e(status.FAILED_PRECONDITION, 'etcdserver: permission is not granted to the role'),
  authNotEnabled: e(status.FAILED_PRECONDITION, 'etcdserver: authentication is not enabled'),
  invalidAuthToken: e(status.UNAUTHENTICATED, 'etcdserver: invalid auth token'),
  invalidAuthMgmt: e(status.INVALID_ARGUMENT, 'etcdserver: invalid auth management'),
  authOldRevision: e(status.INVALID_ARGUMENT, 'etcdserver: revision of auth store is old'),
  // etcd answers a password for a no-password user with an error missing from its gRPC map,
  // so it leaves as Unknown with the auth package's text.
  noPasswordUser: e(status.UNKNOWN, 'auth: authentication failed, password was given for no password user'),
  // kvs's own: etcd's bbolt would refuse such a key by crashing the member.
  nameTooLong: (what: 'user' | 'role', max: number) =>
    e(status.INVALID_ARGUMENT, `kvs: ${what} name is longer than ${max} bytes (the embedded database's key size limit)`),
} as const;
