// Checks of the Maintenance, Lock and Election services while auth is enabled.
//
// Maintenance follows etcd's later releases: Status and listing alarms need a user, the rest
// (Defragment, Hash, HashKV, MoveLeader, Snapshot, alarm changes) the root role.
// Lock and Election run etcd's recipes in the gateway (docs/architecture.md); etcd runs them
// on an in-process client carrying the caller's token, so their reads and writes are checked
// as the caller's. Here the whole recipe is checked up front: read and write on the name's
// prefix (name + "/", where the recipes keep their keys), read only to follow a leader.
import type { ServerCall } from '../../../shared/grpc/http2-server.js';
import type { Caller } from './gate.js';

type Check = (caller: Caller, call: ServerCall<any, any>) => void;

function prefixRange(name: Uint8Array): [Buffer, Buffer] {
  const pfx = Buffer.concat([name, Buffer.from('/')]);
  const end = Buffer.from(pfx);
  let i = end.length - 1;
  while (i >= 0 && end[i] === 0xff) i--;
  if (i < 0) return [pfx, Buffer.from([0])];
  end[i]!++;
  return [pfx, end.subarray(0, i + 1)];
}

const readWritePrefix = (name: Uint8Array | undefined, c: Caller) => {
  c.requireUser();
  const [k, e] = prefixRange(name ?? Buffer.alloc(0));
  c.read(k, e);
  c.write(k, e);
};
const readPrefix = (name: Uint8Array | undefined, c: Caller) => {
  c.requireUser();
  const [k, e] = prefixRange(name ?? Buffer.alloc(0));
  c.read(k, e);
};
const readWriteKey = (key: Uint8Array | undefined, c: Caller) => {
  c.requireUser();
  if (!key?.length) return; // the recipe answers the missing key
  c.read(key);
  c.write(key);
};

export const maintenanceChecks: Record<string, Check> = {
  Status: (c) => c.requireUser(),
  Alarm: (c, call) => (call.request?.action ? c.admin() : c.requireUser()),
  Defragment: (c) => c.admin(),
  Hash: (c) => c.admin(),
  HashKV: (c) => c.admin(),
  MoveLeader: (c) => c.admin(),
  Snapshot: (c) => c.admin(),
};

export const lockChecks: Record<string, Check> = {
  Lock: (c, call) => readWritePrefix(call.request?.name, c),
  Unlock: (c, call) => readWriteKey(call.request?.key, c),
};

export const electionChecks: Record<string, Check> = {
  Campaign: (c, call) => readWritePrefix(call.request?.name, c),
  Proclaim: (c, call) => readWriteKey(call.request?.leader?.key, c),
  Resign: (c, call) => readWriteKey(call.request?.leader?.key, c),
  Leader: (c, call) => readPrefix(call.request?.name, c),
  Observe: (c, call) => readPrefix(call.request?.name, c),
};
